"""The pipeline page: every job of one pipeline as a graph (parent → children, and each
fan-in with the jobs it waited for), kept live in the browser by
``console/static/console/pipeline.js`` from the pipeline's event stream.

The page and its graph fragment are rendered here from the jobs table; the script then
applies each streamed event to the job's box, and fetches the graph fragment again only
when an event names a job the page does not show yet (a chained child, a job queued by a
running one). Each
box carries the id of the newest history row it reflects, so an event the page already
shows is never applied twice, whichever of the two arrives first.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.core.exceptions import PermissionDenied
from django.db.models import Max, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from console.admin.operations import Operation
from jobs import pipelines
from jobs.models import Dependency, Job, JobEvent

# A pipeline page draws at most this many jobs (a huge fan-out is read in the job list).
MAX_JOBS = 300
GRAPH_FIELDS = (
    "id",
    "type",
    "state",
    "parent_id",
    "pipeline_id",
    "attempts",
    "max_attempts",
    "progress_done",
    "progress_total",
    "progress_message",
    "last_error",
    "created_at",
    "started_at",
    "finished_at",
    "tenant_id",
)


# Siblings (a parent's children, a fan-in's prerequisites, the roots) beyond this many
# are folded: the unfinished and failed ones first and in view, the rest behind a summary.
FOLD_AT = 12
SHOWN_WHEN_FOLDED = 8
# The order siblings are drawn in: what needs a look first.
STATE_ORDER: dict[str, int] = {
    Job.State.FAILED: 0,
    Job.State.RUNNING: 1,
    Job.State.PENDING: 2,
    Job.State.CANCELLED: 3,
    Job.State.SUCCEEDED: 4,
}


class PipelineAdmin(Protocol):
    """What the page needs from the job admin (``console.admin.job.JobAdmin``)."""

    admin_site: Any

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]: ...

    def permitted_operations(self, request: HttpRequest) -> list[Any]: ...


@dataclass
class Node:
    """One job's box, with the jobs it leads to: its chained children, and for a fan-in
    the jobs it waited for that are drawn nowhere else."""

    job: Job
    last_event: int
    buttons: list[tuple[Operation, bool]]
    waits_for: list[int] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    prerequisites: list[Node] = field(default_factory=list)

    @property
    def percent(self) -> float | None:
        total = self.job.progress_total
        return min(100.0, 100 * self.job.progress_done / total) if total else None

    @property
    def progress_text(self) -> str:
        """As the job page and the list write it: "1,500/3,000 (50%)"."""
        job = self.job
        if job.progress_total:
            return f"{job.progress_done:,}/{job.progress_total:,} ({self.percent:.0f}%)"
        return f"{job.progress_done:,}" if job.progress_done else ""

    def below(self) -> list[Node]:
        return self.prerequisites + self.children

    @property
    def children_group(self) -> Siblings:
        return Siblings.of(self.children)

    @property
    def prerequisites_group(self) -> Siblings:
        return Siblings.of(self.prerequisites)


@dataclass(frozen=True)
class Siblings:
    """Jobs drawn side by side. Up to FOLD_AT in id order; beyond, failures first, then
    running and pending ones, and whatever passes SHOWN_WHEN_FOLDED behind a summary of
    its states (40 succeeded recalculation chunks need a count, not 40 boxes). Folded
    boxes stay in the page, so the live updates still reach them."""

    shown: list[Node]
    folded: list[Node]

    @classmethod
    def of(cls, nodes: list[Node]) -> Siblings:
        if len(nodes) <= FOLD_AT:
            return cls(nodes, [])
        ordered = sorted(nodes, key=lambda node: (STATE_ORDER.get(node.job.state, 5), node.job.pk))
        return cls(ordered[:SHOWN_WHEN_FOLDED], ordered[SHOWN_WHEN_FOLDED:])

    def folded_counts(self) -> list[tuple[str, int]]:
        return state_counts(node.job.state for node in self.folded)


@dataclass
class Graph:
    pipeline_id: uuid.UUID
    roots: list[Node]
    jobs: list[Job]
    truncated: bool
    last_event: int

    @property
    def state(self) -> str:
        return pipelines.summary(job.state for job in self.jobs)

    @property
    def finished(self) -> bool:
        return all(job.state in Job.FINISHED for job in self.jobs)

    @property
    def roots_group(self) -> Siblings:
        return Siblings.of(self.roots)

    def counts(self) -> list[tuple[str, int]]:
        return state_counts(job.state for job in self.jobs)


def state_counts(states: Iterable[str]) -> list[tuple[str, int]]:
    """How many jobs are in each state, in the states' own order, absent ones left out."""
    counted = Counter(states)
    return [(state, counted[state]) for state in Job.State.values if counted[state]]


def pipeline_jobs(jobs: QuerySet[Job], pipeline_id: uuid.UUID) -> list[Job]:
    """The pipeline's jobs (the first MAX_JOBS + 1 by id); payloads stay in the table."""
    return list(jobs.filter(pipeline_id=pipeline_id).only(*GRAPH_FIELDS).order_by("id")[: MAX_JOBS + 1])


def fan_in_edges(job_ids: list[int]) -> dict[int, list[int]]:
    """For each of these jobs that waited on others, the ids it waited on."""
    edges: dict[int, list[int]] = {}
    for waiter, prerequisite in (
        Dependency.objects.filter(waiter__in=job_ids)
        .order_by("waiter", "prerequisite")
        .values_list("waiter", "prerequisite")
    ):
        edges.setdefault(waiter, []).append(prerequisite)
    return edges


def newest_events(job_ids: list[int]) -> dict[int, int]:
    """The newest history row of each job (the job/id index answers each group)."""
    rows = (
        JobEvent.objects.filter(job_id__in=job_ids)
        .values("job_id")
        .annotate(newest=Max("id"))
        .values_list("job_id", "newest")
    )
    return dict(rows)


def build_graph(pipeline_id: uuid.UUID, jobs: list[Job], operations: list[Operation]) -> Graph:
    """Jobs become nodes under their parent; a job without a parent in the graph goes
    under the first fan-in that waited for it; any other job is a root. A job whose
    placement would hang it below itself (a fan-in waiting on its own ancestor) is a root
    too, so that every job is drawn once."""
    truncated = len(jobs) > MAX_JOBS
    jobs = jobs[:MAX_JOBS]
    newest = newest_events([job.pk for job in jobs])
    edges = fan_in_edges([job.pk for job in jobs])
    nodes = {
        job.pk: Node(
            job, newest.get(job.pk, 0), [(op, op.allows(job)) for op in operations], edges.get(job.pk, [])
        )
        for job in jobs
    }
    waited_by: dict[int, int] = {}
    for waiter in sorted(edges):
        for prerequisite in edges[waiter]:
            waited_by.setdefault(prerequisite, waiter)
    above: dict[int, int] = {}
    for pk, node in nodes.items():
        if node.job.parent_id in nodes:
            above[pk] = node.job.parent_id
        elif waited_by.get(pk) in nodes:
            above[pk] = waited_by[pk]
    for pk in nodes:  # break any loop: each node's chain upwards must end at a root
        seen, current = {pk}, above.get(pk)
        while current is not None and current not in seen:
            seen.add(current)
            current = above.get(current)
        if current is not None:
            above.pop(pk)
    roots: list[Node] = []
    for pk, node in nodes.items():
        if pk not in above:
            roots.append(node)
        elif above[pk] == node.job.parent_id:
            nodes[above[pk]].children.append(node)
        else:
            nodes[above[pk]].prerequisites.append(node)
    return Graph(pipeline_id, roots, jobs, truncated, max(newest.values(), default=0))


def load_graph(model_admin: PipelineAdmin, request: HttpRequest, pipeline_id: uuid.UUID) -> Graph:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    jobs = pipeline_jobs(model_admin.get_queryset(request), pipeline_id)
    if not jobs:
        raise Http404("No such pipeline visible to you.")
    return build_graph(pipeline_id, jobs, model_admin.permitted_operations(request))


def graph_context(request: HttpRequest, graph: Graph) -> dict[str, Any]:
    page_url = reverse("admin:jobs_job_pipeline", args=[graph.pipeline_id])
    return {"graph": graph, "page_url": page_url}


def page_view(model_admin: PipelineAdmin, request: HttpRequest, pipeline_id: uuid.UUID) -> HttpResponse:
    """The whole page; the script keeps it live."""
    graph = load_graph(model_admin, request, pipeline_id)
    context = {
        **model_admin.admin_site.each_context(request),
        **graph_context(request, graph),
        "title": f"Pipeline {pipeline_id}",
        "opts": Job._meta,
        "events_url": reverse("pipeline-events", args=[pipeline_id]),
        "graph_url": reverse("admin:jobs_job_pipeline_graph", args=[pipeline_id]),
        "list_url": f"{reverse('admin:jobs_job_changelist')}?pipeline={pipeline_id}",
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/jobs/pipeline.html", context)


def graph_view(model_admin: PipelineAdmin, request: HttpRequest, pipeline_id: uuid.UUID) -> HttpResponse:
    """The graph alone, for the script to swap in when a job it does not show appears."""
    graph = load_graph(model_admin, request, pipeline_id)
    return TemplateResponse(request, "admin/jobs/pipeline_graph.html", graph_context(request, graph))
