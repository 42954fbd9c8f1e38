"""Event storage: the log and snapshots on memory, SQLite and PostgreSQL."""
