"""Benchmarks: latency and score of every variant, each in its own process, beside the peers."""
