"""The factors tests' builders and helpers."""
