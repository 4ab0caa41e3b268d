"""Benchmark harness (results are pandas DataFrames)."""
