"""Ingesters, one per kind of source (``base`` says the contract)."""
