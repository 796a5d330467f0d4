"""Benchmarks of the product against its baselines (`make bench`)."""
