"""Hooks that ship with Conveyor, runnable as ``python -m ingest.hookkit.<name>`` in the
Conveyor image on Kubernetes or as local processes. They read only their environment
(``INGEST_BATCH_URL`` and friends) and their arguments, never the database."""
