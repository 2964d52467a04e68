"""The exports tests' builders and helpers."""
