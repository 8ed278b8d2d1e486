"""Benchmarks: measured side by side in one run, medians over repetitions."""
