"""Benchmarks: targets are ratios and percentiles measured in one run, never timed tests."""
