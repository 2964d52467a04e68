"""Ingesters, one per kind of source (``base`` says the contract). Importing this package
registers the kinds Conveyor ships: ``http_json`` and ``files``."""

from ingest.runs.ingesters import files, http_json  # noqa: F401 (they register themselves)
from ingest.runs.ingesters.base import (
    Fetched,
    Ingester,
    get,
    kinds,
    problems,
    register,
    usable_config,
    validate_config,
)

__all__ = ["Fetched", "Ingester", "get", "kinds", "problems", "register", "usable_config", "validate_config"]
