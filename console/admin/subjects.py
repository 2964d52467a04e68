"""What a job works for: the domain object (an ingest run, a snapshot, a day load …) an
operator needs once a job's own page has said what failed.

The engine knows a job by its type, payload, tenant and pipeline; only the app that
enqueued it knows which of its rows it serves. So each app registers, from its own
admin module, a resolver for its job types::

    register_job_subject(["ingest.RunHooks", ...], ingest_runs, permission="ingest.view_ingestrun")

A resolver takes the request and a list of jobs of those types and answers, for those
it can place, a ``Subject``: a label and the admin page, the domain's own failure
message and the domain's own actions. It is called once per type group for a whole
list of jobs (``subjects``), so it must look its rows up in one query, scoped to the
request's user (``tenancy.scoping.scope_queryset``): a row the user may not see is no
subject. Its permission is checked before it is called: a user who may not view the
domain's page gets no link to it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from django.http import HttpRequest

from jobs.models import Job


@dataclass(frozen=True)
class SubjectAction:
    """A button of the domain's own: ``fields`` are posted to ``url`` (the page it
    redirects to reports the outcome). ``method="get"`` makes it a link instead."""

    label: str
    url: str
    fields: Mapping[str, str] = field(default_factory=dict)
    method: str = "post"


@dataclass(frozen=True)
class Subject:
    """What a job works for, as its page shows it.

    ``parts`` are further links inside the subject ("batch 3"). ``message`` is the
    domain's own account of a failure (the hook's last line), which says more than the
    job's error. ``replaces_retry`` says why retrying the failed job alone is not the fix
    ("retrying this job alone would not reopen the run"): the job's page and its why
    line then point at the domain's actions, and retrying the job's failure group warns
    first, linking them."""

    label: str
    url: str
    parts: tuple[tuple[str, str], ...] = ()
    message: str = ""
    actions: tuple[SubjectAction, ...] = ()
    replaces_retry: str = ""


Resolver = Callable[[HttpRequest, Sequence[Job], bool], Mapping[int, Subject]]


@dataclass(frozen=True)
class _Registration:
    resolver: Resolver
    permission: str


_REGISTRY: dict[str, _Registration] = {}


def register_job_subject(types: str | Iterable[str], resolver: Resolver, *, permission: str) -> None:
    """Say what jobs of ``types`` work for. ``resolver(request, jobs, detail)`` answers
    ``{job id: Subject}``; with ``detail`` false (a list of jobs) it may leave out the
    message and the actions, not ``replaces_retry``: retrying a failure group warns
    from it, over every job the retry takes. ``permission`` is the one needed to view the subject's
    page. A type registered twice is an error: two apps would claim one job type."""
    for job_type in [types] if isinstance(types, str) else types:
        known = _REGISTRY.get(job_type)
        if known is not None and known.resolver is not resolver:
            raise ValueError(f"the subject of {job_type!r} jobs is registered already")
        _REGISTRY[job_type] = _Registration(resolver, permission)


def subjects(request: HttpRequest, jobs: Iterable[Job], *, detail: bool = False) -> dict[int, Subject]:
    """The subjects of ``jobs`` the request's user may see: one resolver call per type."""
    by_resolver: dict[Resolver, list[Job]] = defaultdict(list)
    for job in jobs:
        registration = _REGISTRY.get(job.type)
        if registration is not None and request.user.has_perm(registration.permission):
            by_resolver[registration.resolver].append(job)
    found: dict[int, Subject] = {}
    for resolver, group in by_resolver.items():
        found.update(resolver(request, group, detail))
    return found


def subject(request: HttpRequest, job: Job) -> Subject | None:
    """The subject of one job, with its message and actions (the job's page)."""
    return subjects(request, [job], detail=True).get(job.pk)


def registered_types() -> frozenset[str]:
    return frozenset(_REGISTRY)


RETRY_HINT = "; retry it to run again"


def why_with_subject(job: Job, why: str, subject: Subject | None) -> str:
    """The why line, naming what the job works for; for a failed job whose subject has a
    retry of its own, pointing there instead of at the job's."""
    if subject is None:
        return why
    if job.state == Job.State.FAILED and subject.replaces_retry and why.endswith(RETRY_HINT):
        fix = " or ".join(f"“{action.label}”" for action in subject.actions) or "its page"
        why = why.removesuffix(RETRY_HINT)
        return f"{why}; it works for {subject.label}: use {fix} ({subject.replaces_retry})"
    return f"{why} (it works for {subject.label})"
