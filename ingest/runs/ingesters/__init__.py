"""Ingesters, one per kind of source (``base`` says the contract)."""

from ingest.runs.ingesters.base import Fetched, Ingester, get, kinds, register, validate_config

__all__ = ["Fetched", "Ingester", "get", "kinds", "register", "validate_config"]
