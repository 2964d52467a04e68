"""Benchmarks that print figures; never part of the test run (see docs/benchmarks.md)."""
