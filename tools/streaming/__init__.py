"""Streaming drivers: `make demo-streaming` and `make soak` over the Pub/Sub emulator."""
