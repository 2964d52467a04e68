"""The ingest tests' builders and helpers."""
