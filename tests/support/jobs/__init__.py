"""The jobs tests' builders and helpers."""
