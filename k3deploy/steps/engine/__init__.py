"""The engine: its image, the launch per rank, the wait, verify, the compile caches."""
