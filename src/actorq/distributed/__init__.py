"""Backends that run actors and carry snapshots and transitions: synchronous, local processes."""
