"""Benchmarks: rates measured against the physical limit in the same run."""
