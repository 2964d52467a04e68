"""Django's admin autodiscovery imports ``<app>.admin`` of every installed app; the ingest
model admins live in ``ingest.runs.admin`` (sources, runs, breakers) and
``ingest.scraping.admin`` (scrape runs, references, handoffs), and importing them
registers them."""

from __future__ import annotations

from console.admin import register_job_subject
from ingest.runs import admin as runs_admin
from ingest.runs import subjects as run_subjects
from ingest.scraping import admin as scraping_admin
from ingest.scraping import subjects as handoff_subjects

__all__ = ["runs_admin", "scraping_admin"]


# What the runs' and the handoffs' jobs work for, on the job pages and failure groups: a
# run that ingests a scraped reference works for its handoff too.
register_job_subject(
    run_subjects.RUN_JOBS, handoff_subjects.run_and_handoff_subjects, permission=run_subjects.VIEW_RUNS
)
register_job_subject(
    handoff_subjects.HANDOFF_JOBS,
    handoff_subjects.handoff_subjects,
    permission=handoff_subjects.VIEW_HANDOFFS,
)
