"""How a command commits, end to end: the unit of work and its cache trust, the retry and
lock policy, the save and snapshots, the read-model step that commits with the events, and
group commit. The domain sees only its ports (``domain.ports``); the backends in
``storage/`` each offer one way to insert events with a read-model step."""
