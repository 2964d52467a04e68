"""The app's models, defined in its parts (``ingest.runs``) and gathered here for Django."""

from ingest.runs.models import (
    Hook,
    HookExecution,
    IngestBatch,
    IngestRecord,
    IngestRun,
    IngestSource,
    RunAction,
    RunnerBreaker,
)

__all__ = ["Hook", "HookExecution", "IngestBatch", "IngestRecord", "IngestRun", "IngestSource",
           "RunAction", "RunnerBreaker"]
