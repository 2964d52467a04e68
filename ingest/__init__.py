"""Ingest runs: a source's records fetched batch by batch, each batch checked by the
source's hooks (local processes, or Kubernetes Jobs in production) and then published to
readers in one step. ``ingest.runs`` holds the pipeline and ``ingest.scraping`` the
scraper's handoffs built on it; one Django app keeps the migrations of both."""
