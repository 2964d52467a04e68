"""The app's models, defined in its parts (``ingest.runs``, ``ingest.scraping``) and
gathered here for Django."""

from ingest.runs.models import (
    Hook,
    HookExecution,
    HookTemplate,
    IngestBatch,
    IngestRecord,
    IngestRun,
    IngestSource,
    RunAction,
    RunnerBreaker,
)
from ingest.scraping.models import (
    HandoffTransition,
    IngestionHandoff,
    ScrapeReference,
    ScrapeRun,
)

__all__ = [
    "Hook",
    "HookExecution",
    "HookTemplate",
    "IngestBatch",
    "IngestRecord",
    "IngestRun",
    "IngestSource",
    "RunAction",
    "RunnerBreaker",
    "HandoffTransition",
    "IngestionHandoff",
    "ScrapeReference",
    "ScrapeRun",
]
