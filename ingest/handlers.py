"""The app's job types, registered from its parts (the engine imports every app's
``handlers`` module at start-up)."""

from ingest.runs import handlers  # noqa: F401
from ingest.scraping import handlers as scraping_handlers  # noqa: F401
