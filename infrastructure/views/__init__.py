"""Read-model storage and the machinery that keeps it current: projector, worker, rebuild."""
