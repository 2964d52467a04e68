"""The engine's tables. Only ``jobs.engine`` changes a job's state; see its docstring.

The invariants the engine relies on are enforced here, by PostgreSQL:
- one running job per concurrency key and key scope (``jobs_job_one_current_per_key``),
- one unfinished job per unique key and tenant (``jobs_job_one_active_per_unique_key``),
- one job waiting to start per pending key and tenant (``jobs_job_one_pending_per_key``),
- a running job always carries a lease, a finished one a finish time,
- a job waits on another at most once, and never on itself (``Dependency``).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from jobs.errors import WAKE_KEY_LENGTH
from jobs.history import History, actor_field


class JobQuerySet(models.QuerySet["Job"]):
    def unfinished(self) -> JobQuerySet:
        return self.filter(state__in=Job.UNFINISHED)

    def finished(self) -> JobQuerySet:
        return self.filter(state__in=Job.FINISHED)

    def waiting_to_start(self) -> JobQuerySet:
        """Pending jobs never claimed: the ones a pending key can name (keep in step with
        ``jobs_job_one_pending_per_key``)."""
        return self.filter(state=Job.State.PENDING, started_at__isnull=True)

    def due(self, now: datetime) -> JobQuerySet:
        return self.filter(state=Job.State.PENDING, run_after__lte=now)

    def claimable(self, now: datetime, types: list[str], queues: list[str]) -> JobQuerySet:
        """Due pending jobs this worker can run: known type, served queue, parent done,
        every prerequisite finished, and (for keyed jobs) no running job holding the key
        and no earlier due job of the key waiting (the head of the key runs first)."""
        qs = self.due(now).filter(type__in=types)
        if queues:
            qs = qs.filter(queue__in=queues)
        same_key = Job.objects.filter(
            concurrency_key=models.OuterRef("concurrency_key"), key_scope=models.OuterRef("key_scope")
        )
        key_held = same_key.filter(state=Job.State.RUNNING)
        # An earlier due job of the key: this one is not the head of its key.
        queued_before = (
            same_key.due(now)
            .filter(pk__lt=models.OuterRef("pk"), type__in=types)
            .filter(Q(parent__isnull=True) | Q(parent__state=Job.State.SUCCEEDED))
            .filter(Q(waits=False) | ~models.Exists(unfinished_prerequisites()))
        )
        return qs.filter(
            Q(parent__isnull=True) | Q(parent__state=Job.State.SUCCEEDED),
            Q(waits=False) | ~models.Exists(unfinished_prerequisites()),
            Q(concurrency_key__isnull=True) | (~models.Exists(key_held) & ~models.Exists(queued_before)),
        )

    def lease_expired(self, now: datetime) -> JobQuerySet:
        return self.filter(state=Job.State.RUNNING, lease_expires_at__lt=now)


def unfinished_prerequisites() -> models.QuerySet[Dependency]:
    """The edges to unfinished prerequisites of the job of the enclosing query (for an
    ``Exists``): while there is one, the job waits."""
    return Dependency.objects.filter(waiter=models.OuterRef("pk"), prerequisite__state__in=Job.UNFINISHED)


class Job(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class ErrorKind(models.TextChoices):
        TRANSIENT = "transient", "Transient (retried)"
        PERMANENT = "permanent", "Permanent"
        LEASE_EXPIRED = "lease_expired", "Lease expired (worker died)"
        TIMEOUT = "timeout", "Ran past its time limit"
        PARENT_FAILED = "parent_failed", "Parent did not succeed"

    UNFINISHED = (State.PENDING, State.RUNNING)
    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    id = models.BigAutoField(primary_key=True)
    type = models.CharField("type", max_length=100, help_text="The registered handler that runs it.")
    queue = models.CharField("queue", max_length=50, default="default")
    priority = models.SmallIntegerField("priority", default=0, help_text="Higher runs first.")
    state = models.CharField("state", max_length=10, choices=State.choices, default=State.PENDING)
    payload = models.JSONField("payload", default=dict, blank=True)
    result = models.JSONField("result", null=True, blank=True)

    progress_done = models.BigIntegerField("done", default=0)
    progress_total = models.BigIntegerField("total", null=True, blank=True)
    progress_message = models.CharField("progress message", max_length=300, blank=True)

    attempts = models.PositiveIntegerField(
        "attempts", default=0, help_text="Attempts started so far (a snooze gives one back)."
    )
    max_attempts = models.PositiveIntegerField("max attempts", default=5)
    run_after = models.DateTimeField(
        "run after", help_text="Not claimed before this time (backoff, snooze, schedule)."
    )

    locked_by = models.CharField(
        "locked by", max_length=200, blank=True, help_text="The worker holding the lease."
    )
    locked_at = models.DateTimeField("locked at", null=True, blank=True)
    heartbeat_at = models.DateTimeField("last heartbeat", null=True, blank=True)
    lease_expires_at = models.DateTimeField(
        "lease expires",
        null=True,
        blank=True,
        help_text="Without a heartbeat by then the worker is presumed dead and the job rescued.",
    )
    lease_token = models.UUIDField(
        "lease token",
        null=True,
        blank=True,
        editable=False,
        help_text="Fences each attempt: only the holder of the current token may finish it.",
    )
    rescues = models.PositiveIntegerField(
        "rescues", default=0, help_text="Times the reaper took it back from a dead worker."
    )

    pipeline_id = models.UUIDField("pipeline", default=uuid.uuid4, db_index=True)
    parent = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="children",
        db_index=False,  # jobs_job_parent_idx holds the jobs that have one
    )
    # NULL, not "", means "no key": the partial unique indexes below ignore NULLs.
    concurrency_key = models.CharField(  # noqa: DJ001
        "concurrency key",
        max_length=200,
        null=True,
        blank=True,
        help_text="Jobs sharing a key never run at the same time.",
    )
    # A default in the table too: the engine's own INSERT statements leave the column out.
    waits = models.BooleanField(
        "waits on other jobs",
        default=False,
        db_default=False,
        help_text="Enqueued with after=: not claimed before those jobs have finished.",
    )
    is_current = models.BooleanField(
        "current for its key",
        default=False,
        help_text="The job that last held its concurrency key (the one running, if any).",
    )
    # Keys are per tenant: one tenant's job never waits on, nor learns of, another
    # tenant's job that happens to use the same key. 0 is the platform's scope: jobs with
    # no tenant, and jobs whose handler declares its keys global (``global_keys``).
    key_scope = models.BigIntegerField(
        "key scope",
        default=0,
        help_text="Where the concurrency key applies: the tenant's id, or 0 for the platform.",
    )
    unique_key = models.CharField(  # noqa: DJ001
        "unique key",
        max_length=200,
        null=True,
        blank=True,
        help_text="Enqueueing again while a job with this key is unfinished returns that job.",
    )
    pending_key = models.CharField(  # noqa: DJ001
        "pending key",
        max_length=200,
        null=True,
        blank=True,
        help_text="Enqueueing again while a job with this key waits to start returns that "
        "job; once it has started, the next request queues a new one.",
    )
    # Set only while the job sleeps in a snooze that ``jobs.wake`` may end early: the
    # snooze writes it, the claim and every operator action clear it.
    wake_key = models.CharField(  # noqa: DJ001
        "wake key",
        max_length=WAKE_KEY_LENGTH,
        null=True,
        blank=True,
        help_text="Snoozed until this key is woken (jobs.wake) or the snooze ends.",
    )
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="jobs",
        db_index=False,  # jobs_job_tenant_idx leads with it
    )

    error_kind = models.CharField("error kind", max_length=20, choices=ErrorKind.choices, blank=True)
    last_error = models.TextField("last error", blank=True)

    created_at = models.DateTimeField("created")
    started_at = models.DateTimeField("started", null=True, blank=True)
    finished_at = models.DateTimeField("finished", null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # jobs_job_created_by_idx holds the jobs that have one
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        permissions = [("operate_job", "Can operate jobs (recover, retry, cancel, run now)")]
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                name="jobs_job_state_valid",
                condition=Q(state__in=["pending", "running", "succeeded", "failed", "cancelled"]),
            ),
            models.CheckConstraint(
                name="jobs_job_attempts_within_max", condition=Q(attempts__lte=models.F("max_attempts"))
            ),
            models.CheckConstraint(name="jobs_job_max_attempts_positive", condition=Q(max_attempts__gte=1)),
            models.CheckConstraint(
                name="jobs_job_running_has_lease",
                condition=~Q(state="running")
                | Q(lease_token__isnull=False, locked_at__isnull=False, lease_expires_at__isnull=False),
            ),
            models.CheckConstraint(
                name="jobs_job_finished_has_time",
                condition=~Q(state__in=["succeeded", "failed", "cancelled"]) | Q(finished_at__isnull=False),
            ),
            models.CheckConstraint(name="jobs_job_progress_nonnegative", condition=Q(progress_done__gte=0)),
            models.CheckConstraint(
                name="jobs_job_current_needs_key",
                condition=Q(is_current=False) | Q(concurrency_key__isnull=False),
            ),
            models.CheckConstraint(name="jobs_job_key_scope_nonnegative", condition=Q(key_scope__gte=0)),
            # The claim moves is_current to the new job in the same transaction; a second
            # claimer for the same key (in the same scope) trips this index and loses.
            models.UniqueConstraint(
                fields=["key_scope", "concurrency_key"],
                condition=Q(is_current=True),
                name="jobs_job_one_current_per_key",
            ),
            # Idempotent enqueue: while a keyed job is unfinished, a second insert conflicts.
            # Keys are per tenant (NULL, the platform, counts as one tenant), so one
            # tenant's job can never answer, or block, another tenant's enqueue.
            models.UniqueConstraint(
                fields=["tenant", "unique_key"],
                condition=Q(state__in=["pending", "running"], unique_key__isnull=False),
                nulls_distinct=False,
                name="jobs_job_one_active_per_unique_key",
            ),
            # Coalesced requests: while a keyed job waits to start, a second insert
            # conflicts; its claim frees the key, so a request arriving while it runs
            # queues exactly one more. "Never started" rather than "pending": a job that
            # returns to pending (retry, snooze, rescue, release) must not collide with
            # the one queued behind it. Per tenant, like unique keys.
            models.UniqueConstraint(
                fields=["tenant", "pending_key"],
                condition=Q(state="pending", started_at__isnull=True, pending_key__isnull=False),
                nulls_distinct=False,
                name="jobs_job_one_pending_per_key",
            ),
        ]
        indexes = [
            # The claim: due pending jobs of a queue in priority order.
            models.Index(
                fields=["queue", "-priority", "id"],
                condition=Q(state="pending"),
                name="jobs_job_claim_idx",
            ),
            # The reaper: running jobs whose lease ran out.
            models.Index(
                fields=["lease_expires_at"], condition=Q(state="running"), name="jobs_job_lease_idx"
            ),
            # Admin/API filters and the dashboard: by type and state, newest first.
            models.Index(fields=["type", "state", "-id"], name="jobs_job_type_state_idx"),
            models.Index(fields=["state", "-id"], name="jobs_job_state_idx"),
            # Dashboard windows and retention: finished jobs by finish time.
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="jobs_job_finished_idx",
            ),
            # Keyed lookups: "who holds this key" (the claim's check, the "why" line), and
            # tenant-scoped listings.
            models.Index(
                fields=["concurrency_key", "key_scope", "state"],
                name="jobs_job_key_idx",
                condition=Q(concurrency_key__isnull=False),
            ),
            # The claim's "head of its key" check: the earliest pending jobs of a key.
            models.Index(
                fields=["concurrency_key", "key_scope", "id"],
                name="jobs_job_key_queue_idx",
                condition=Q(state="pending", concurrency_key__isnull=False),
            ),
            # A tenant's jobs. Partial: the platform's own jobs are listed by the other
            # indexes, and a job without a tenant writes no entry here.
            models.Index(
                fields=["tenant", "-id"], name="jobs_job_tenant_idx", condition=Q(tenant__isnull=False)
            ),
            # Fair claims: which tenants' running jobs hold how many workers. Partial, so
            # that it stays empty (and free to probe) while no tenant's job runs.
            models.Index(
                fields=["tenant", "locked_by"],
                name="jobs_job_running_tenant_idx",
                condition=Q(state="running", tenant__isnull=False),
            ),
            # A parent's children, a user's jobs (and deleting either): partial, because
            # most jobs have neither, and each index entry is paid by every enqueue.
            models.Index(fields=["parent"], condition=Q(parent__isnull=False), name="jobs_job_parent_idx"),
            models.Index(
                fields=["created_by"], condition=Q(created_by__isnull=False), name="jobs_job_created_by_idx"
            ),
            # Failures in a window (the console's figures and failure triage): the
            # failed among the finished, which are mostly successes.
            models.Index(fields=["finished_at"], condition=Q(state="failed"), name="jobs_job_failed_idx"),
            # The admin's "rescued" filter, newest first: rescued jobs are rare, and
            # without it finding 50 of them would walk the whole table by id.
            models.Index(fields=["-id"], condition=Q(rescues__gt=0), name="jobs_job_rescued_idx"),
            # jobs.wake: the few jobs snoozed on a key. Empty while nothing waits, so a
            # wake that finds nothing costs one probe of an empty index.
            models.Index(
                fields=["wake_key"], condition=Q(wake_key__isnull=False), name="jobs_job_wake_key_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.type} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state in self.FINISHED

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class Dependency(models.Model):
    """A fan-in edge: ``waiter`` is not claimed before ``prerequisite`` has finished.

    Finished means any outcome (succeeded, failed or cancelled): a job that gathers the
    work of many reads their outcomes itself (``ctx.prerequisites()``) and decides what
    a failed one means, where a parent's failure would cancel a child unseen. Edges are
    written with the waiter, so they can only point to jobs that already exist: no cycle
    can form. A prerequisite deleted by retention (only finished jobs are) takes its
    edges with it.
    """

    id = models.BigAutoField(primary_key=True)
    waiter = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="prerequisite_edges")
    prerequisite = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="waiter_edges")

    class Meta:
        constraints = [
            # Also the claim's index: "does this job still wait on an unfinished one?"
            models.UniqueConstraint(fields=["waiter", "prerequisite"], name="jobs_dependency_once"),
            models.CheckConstraint(
                name="jobs_dependency_not_on_itself", condition=~Q(waiter=models.F("prerequisite"))
            ),
        ]
        indexes = [
            # The pipeline graph and "who waits on this job".
            models.Index(fields=["prerequisite"], name="jobs_dependency_prereq_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.waiter_id} after #{self.prerequisite_id}"


class JobEvent(History):
    """Append-only history: every state change and progress step of a job."""

    class Kind(models.TextChoices):
        CREATED = "created", "Created"
        CLAIMED = "claimed", "Claimed"
        PROGRESS = "progress", "Progress"
        SUCCEEDED = "succeeded", "Succeeded"
        RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
        FAILED = "failed", "Failed"
        SNOOZED = "snoozed", "Snoozed"
        RELEASED = "released", "Released unstarted"
        RESCUED = "rescued", "Rescued from a dead worker"
        CANCELLED = "cancelled", "Cancelled"
        RECOVERED = "recovered", "Recovered by an operator"
        RETRIED = "retried", "Retried by an operator"
        RUN_NOW = "run_now", "Run now by an operator"
        REPLAYED = "replayed", "Replayed by an operator"
        QUARANTINED = "quarantined", "Quarantined by an operator"
        LEASE_LOST = "lease_lost", "Late result refused"
        WOKEN = "woken", "Woken from its snooze"

    id = models.BigAutoField(primary_key=True)
    # Every claim and every outcome inserts a row here, and each index is written with
    # it: the job's is ``jobs_jobevent_job_idx``, which leads with the job, and the
    # actor's holds only the rows an operator wrote.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)
    actor = actor_field(db_index=False)
    kind = models.CharField("what", max_length=20, choices=Kind.choices)
    attempt = models.PositiveIntegerField("attempt", default=0)
    progress_done = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    worker = models.CharField("worker", max_length=200, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # A job's timeline, and stream replay after Last-Event-ID.
            models.Index(fields=["job", "id"], name="jobs_jobevent_job_idx"),
            # A user's actions, and clearing them when the user is deleted.
            models.Index(fields=["actor"], name="jobs_jobevent_actor_idx", condition=Q(actor__isnull=False)),
            # The dashboard's retries and rescues in a window (console/dashboard.py).
            models.Index(
                fields=["at"],
                condition=Q(kind__in=["retry_scheduled", "rescued"]),
                name="jobs_jobevent_incident_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.job_id} at {self.at:%H:%M:%S}"


class Event(models.Model):
    """A published domain event (transactional outbox); its deliveries are jobs."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField("event", max_length=100, db_index=True)
    payload = models.JSONField("payload", default=dict, blank=True)
    tenant = models.ForeignKey(
        "tenancy.Tenant", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    pipeline_id = models.UUIDField("pipeline", null=True, blank=True)
    created_at = models.DateTimeField("published")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.name} #{self.pk}"


class Delivery(models.Model):
    """One subscriber's copy of an event, carried out by a job (retries, backoff, history).

    A quarantined delivery is a poison one held back by an operator: its job is finished
    and is not run again (retried, recovered, replayed) until the delivery is released
    (``jobs.outbox``; the engine refuses under the job's row lock).
    """

    id = models.BigAutoField(primary_key=True)
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    subscriber = models.CharField("subscriber", max_length=100)
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="delivery")
    quarantined_at = models.DateTimeField("quarantined", null=True, blank=True)
    quarantined_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="quarantined by",
        db_index=False,  # jobs_delivery_quarantiner_idx holds the deliveries that have one
    )
    # A default in the table too: publishing inserts deliveries with its own SQL.
    quarantine_reason = models.TextField("quarantine reason", blank=True, default="", db_default="")

    class Meta:
        permissions = [("operate_delivery", "Can operate deliveries (replay, quarantine, release)")]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["event", "subscriber"], name="jobs_delivery_once_per_subscriber"),
            models.CheckConstraint(
                name="jobs_delivery_quarantine_has_reason",
                condition=Q(quarantined_at__isnull=True) | ~Q(quarantine_reason=""),
            ),
        ]
        indexes = [
            # The outbox console's quarantined counts and filter, and retention's "keep
            # these": quarantined deliveries are few, so the index is nearly empty.
            models.Index(
                fields=["subscriber"],
                condition=Q(quarantined_at__isnull=False),
                name="jobs_delivery_quarantined_idx",
            ),
            models.Index(
                fields=["quarantined_by"],
                condition=Q(quarantined_by__isnull=False),
                name="jobs_delivery_quarantiner_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.subscriber}"

    @property
    def deliver_after(self) -> datetime:
        return self.job.run_after


class Worker(models.Model):
    """A live engine worker (one per cluster process), kept fresh by its heartbeat."""

    name = models.CharField("name", max_length=200, unique=True)
    hostname = models.CharField("host", max_length=200)
    pid = models.PositiveIntegerField("pid")
    queues = models.JSONField("queues", default=list, blank=True, help_text="Empty: every queue.")
    started_at = models.DateTimeField("started")
    last_seen_at = models.DateTimeField("last seen")
    jobs_done = models.PositiveBigIntegerField("jobs done", default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    # The host a remote worker's row names (``jobs.remote``): it has no process here.
    REMOTE_HOST = "remote ({credential})"

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues

    @property
    def is_remote(self) -> bool:
        return self.pid == 0 and self.hostname.startswith("remote (")
