"""Sources, their hooks, the hook catalogue, ingest runs with their batches and hook
executions, published records, operators' actions, and the hook runner's circuit
breakers.

Who writes what: platform operators write the catalogue, a tenant's staff its sources
and their hooks; ``start_ingest`` and the operator actions write runs and actions;
``RunIngester`` writes batches; ``RunHooks`` writes hook executions and the breaker;
``PublishBatch`` alone writes records, so a batch's records appear in the one
transaction that marks it published.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Exists, F, Func, OuterRef, Q, Value
from django.db.models.lookups import Exact

import jobs
from ingest import conf
from ingest.runs import catalogue


def _json_type(field: str, kind: str) -> Exact:
    return Exact(Func(F(field), function="jsonb_typeof", output_field=models.CharField()), Value(kind))


def _choices_check(name: str, field: str, choices: type[models.TextChoices]) -> models.CheckConstraint:
    return models.CheckConstraint(name=name, condition=Q(**{f"{field}__in": choices.values}))


class IngestSource(models.Model):
    """Where a tenant's records come from: an ingester kind and its configuration, the
    hooks every batch goes through, and how many hook failures a run tolerates."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+"
    )
    name = models.SlugField(
        "name",
        max_length=64,
        help_text="Unique within the tenant; commands and the API name the source by it.",
    )
    kind = models.CharField(
        "ingester", max_length=32, help_text="Which ingester fetches the records (http_json, files)."
    )
    config = models.JSONField(
        "configuration", default=dict, blank=True, help_text="The ingester's settings, checked when saved."
    )
    batch_size = models.PositiveIntegerField("records per batch", default=conf.batch_records.default)
    max_failures = models.PositiveIntegerField(
        "hook failures before a run fails",
        default=3,
        help_text="A run fails, and its outstanding work is cancelled, once this many hook "
        "executions have failed.",
    )
    enabled = models.BooleanField("enabled", default=True)
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    class Meta:
        ordering = ["tenant__name", "name"]
        verbose_name = "ingest source"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="ingest_source_name_per_tenant"),
            # What a reference's (source, tenant) points at: its source, of its tenant.
            models.UniqueConstraint(fields=["id", "tenant"], name="ingest_source_id_tenant"),
            models.CheckConstraint(name="ingest_source_name_not_empty", condition=~Q(name="")),
            models.CheckConstraint(
                name="ingest_source_config_is_object", condition=_json_type("config", "object")
            ),
            models.CheckConstraint(
                name="ingest_source_batch_size_in_range",
                condition=Q(batch_size__gte=1, batch_size__lte=conf.max_batch_records.default),
            ),
            models.CheckConstraint(
                name="ingest_source_max_failures_positive", condition=Q(max_failures__gte=1)
            ),
        ]

    def __str__(self) -> str:
        return self.name


class HookTemplateQuerySet(models.QuerySet["HookTemplate"]):
    def offered_to(self, tenant: int) -> HookTemplateQuerySet:
        """The enabled entries ``tenant``'s hooks may use: those restricted to no tenant,
        and those restricted to a list that names it."""
        through = HookTemplate.tenants.through
        return self.filter(enabled=True).filter(
            ~Exists(through.objects.filter(hooktemplate_id=OuterRef("pk")))
            | Exists(through.objects.filter(hooktemplate_id=OuterRef("pk"), tenant_id=tenant))
        )


class HookTemplate(models.Model):
    """An entry of the hook catalogue, defined by platform operators: a command in a
    container image, and the parameters a tenant's hook may fill. Tenants choose an entry
    and give values; they never give a command, an image or an environment
    (``ingest.runs.catalogue`` holds the rules)."""

    name = models.SlugField(
        "name", max_length=64, unique=True, help_text="How tenants and the run pages name the entry."
    )
    description = models.TextField(
        "description", blank=True, help_text="What the hook checks, for the tenants offered it."
    )
    image = models.CharField("image", max_length=255, help_text="The container image, on Kubernetes.")
    command = models.JSONField(
        "command",
        default=list,
        help_text='The argument list, run directly (no shell), e.g. ["python", "-m", '
        '"ingest.hookkit.check_records", "--require", "{fields}"]. {name} inside an '
        "argument is replaced by that parameter's value, within that argument; "
        "{{ and }} are literal braces.",
    )
    parameters = models.JSONField(
        "parameters",
        default=list,
        blank=True,
        help_text='What a tenant fills, a JSON list, e.g. [{"name": "fields", "type": "string", '
        '"required": true, "max_length": 200, "pattern": "^[a-z_,]+$"}]. Types: string '
        "(max_length, pattern), integer (min, max), boolean, choice (choices); each "
        "may have a default and a description. Each value is also in the environment "
        "as HOOK_PARAM_<NAME>.",
    )
    env = models.JSONField(
        "environment", default=dict, blank=True, help_text="Fixed variables the hook gets, whoever uses it."
    )
    cpu_request = models.CharField("CPU request", max_length=16, blank=True)
    memory_request = models.CharField("memory request", max_length=16, blank=True)
    cpu_limit = models.CharField("CPU limit", max_length=16, blank=True)
    memory_limit = models.CharField("memory limit", max_length=16, blank=True)
    timeout_seconds = models.PositiveIntegerField("time limit (seconds)", default=600)
    enabled = models.BooleanField(
        "enabled",
        default=True,
        help_text="Hooks of a disabled entry do not run: the batch's run fails, saying so.",
    )
    tenants = models.ManyToManyField(
        "tenancy.Tenant",
        verbose_name="offered to",
        blank=True,
        related_name="+",
        help_text="Only these tenants may use the entry; none chosen: every tenant.",
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = HookTemplateQuerySet.as_manager()

    # Not a column: set on the entries ``ingest.runs.sql.batch_with_hooks`` loads, and only there.
    offered: bool

    class Meta:
        ordering = ["name"]
        verbose_name = "hook catalogue entry"
        verbose_name_plural = "hook catalogue"
        constraints = [
            models.CheckConstraint(name="ingest_hook_template_name_not_empty", condition=~Q(name="")),
            models.CheckConstraint(
                name="ingest_hook_template_command_is_list", condition=_json_type("command", "array")
            ),
            models.CheckConstraint(
                name="ingest_hook_template_parameters_is_list", condition=_json_type("parameters", "array")
            ),
            models.CheckConstraint(
                name="ingest_hook_template_env_is_object", condition=_json_type("env", "object")
            ),
            models.CheckConstraint(
                name="ingest_hook_template_timeout_in_range",
                condition=Q(timeout_seconds__gte=1, timeout_seconds__lte=86_400),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean_fields(self, exclude: Collection[str] | None = None) -> None:
        """Django's checks of each field, then the catalogue's rules field by field
        (``catalogue.entry_problems``: resources that are Kubernetes quantities within
        the settings' bounds, the command's placeholders, the environment...), so that
        every path that validates an entry (the admin's form, ``full_clean``) refuses what
        a launch would. A field already refused, or left out by the caller, is not judged
        again, nor is the command when the parameters its placeholders name are.

        Not a CHECK constraint as well: the quantity grammar (suffixes, exponents) and the
        bounds, which are settings, would have to be written again in SQL and kept in step."""
        errors: dict[str, Any] = {}
        try:
            super().clean_fields(exclude=exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        judged_already = set(exclude or ()) | set(errors)
        if "parameters" in judged_already:
            judged_already.add("command")
        for field, lines in catalogue.entry_problems(self).items():
            if field not in judged_already:
                errors[field] = lines
        if errors:
            raise ValidationError(errors)


class Hook(models.Model):
    """A step every batch of a source goes through before it is published: a catalogue
    entry and the values its parameters take for this source. Hooks run in ``position``
    order; each reads the batch from ``INGEST_BATCH_URL`` and passes by exiting 0."""

    source = models.ForeignKey(
        IngestSource, verbose_name="source", on_delete=models.CASCADE, related_name="hooks"
    )
    name = models.SlugField("name", max_length=40)
    position = models.PositiveSmallIntegerField("position", default=0)
    template = models.ForeignKey(
        HookTemplate,
        verbose_name="catalogue entry",
        on_delete=models.PROTECT,
        related_name="hooks",
        help_text="What runs: an entry of the hook catalogue.",
    )
    parameters = models.JSONField(
        "parameters",
        default=dict,
        blank=True,
        help_text='Values of the entry\'s parameters, e.g. {"fields": "id,amount"}.',
    )

    class Meta:
        ordering = ["source", "position", "name"]
        constraints = [
            models.UniqueConstraint(fields=["source", "name"], name="ingest_hook_name_per_source"),
            models.UniqueConstraint(fields=["source", "position"], name="ingest_hook_position_per_source"),
            models.CheckConstraint(
                name="ingest_hook_parameters_is_object", condition=_json_type("parameters", "object")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source}: {self.name}"


class RunStatus(models.TextChoices):
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


class IngestRun(models.Model):
    """One pass over a source: batches fetched one after the other, each checked by the
    hooks and published. All its jobs share ``pipeline``."""

    Status = RunStatus

    # Not columns: set on the run ``ingest.runs.sql.run_for_fetch`` loads, and only there.
    batch_fetched: bool
    previous_session: dict[str, Any] | None

    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+"
    )
    source = models.ForeignKey(
        IngestSource, verbose_name="source", on_delete=models.PROTECT, related_name="runs"
    )
    status = models.CharField("status", max_length=12, choices=Status.choices, default=Status.RUNNING)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="started by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    pipeline = models.UUIDField(
        "pipeline",
        default=uuid.uuid4,
        unique=True,
        editable=False,
        help_text="The pipeline of every job the run queues.",
    )
    batches_ingested = models.PositiveIntegerField("batches fetched", default=0)
    batches_published = models.PositiveIntegerField("batches published", default=0)
    records_published = models.PositiveBigIntegerField("records published", default=0)
    hook_failures = models.PositiveIntegerField("hook failures", default=0)
    max_failures = models.PositiveIntegerField("hook failures allowed")
    ingest_done = models.BooleanField(
        "source exhausted", default=False, help_text="The ingester fetched the last batch."
    )
    failure_reason = models.TextField("failure reason", blank=True)
    started_at = models.DateTimeField("started")
    finished_at = models.DateTimeField("finished", null=True, blank=True)
    reference = models.ForeignKey(
        "ingest.ScrapeReference",
        verbose_name="reference",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="runs",
        help_text="A run that ingests one scraped reference (its handoff's ingestion); empty "
        "for a run over the whole source.",
    )

    class Meta:
        permissions = [("operate_ingestrun", "Can operate ingest runs (start, cancel, retry)")]
        ordering = ["-started_at", "-id"]
        verbose_name = "ingest run"
        indexes = [models.Index(fields=["tenant", "-started_at"], name="ingest_run_tenant_recent")]
        constraints = [
            _choices_check("ingest_run_status_valid", "status", RunStatus),
            models.CheckConstraint(
                name="ingest_run_finished_when_not_running",
                condition=Q(status="running", finished_at__isnull=True)
                | (~Q(status="running") & Q(finished_at__isnull=False)),
            ),
            # A source runs once at a time, and so does each of its references; runs of
            # different references go side by side.
            models.UniqueConstraint(
                fields=["source"],
                condition=Q(status="running", reference__isnull=True),
                name="ingest_run_one_running_per_source",
            ),
            models.UniqueConstraint(
                fields=["reference"],
                condition=Q(status="running"),
                name="ingest_run_one_running_per_reference",
            ),
            models.CheckConstraint(
                name="ingest_run_publishes_what_it_fetched",
                condition=Q(batches_published__lte=F("batches_ingested")),
            ),
            models.CheckConstraint(name="ingest_run_max_failures_positive", condition=Q(max_failures__gte=1)),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.source}"

    @property
    def finished(self) -> bool:
        return self.status != self.Status.RUNNING

    def first_session(self) -> dict:
        """The session the run's first batch starts from: the reference it ingests, if any."""
        return {} if self.reference_id is None else {"reference": self.reference_id}


class BatchStatus(models.TextChoices):
    FETCHED = "fetched", "fetched"
    CHECKING = "checking", "hooks running"
    HOOKS_FAILED = "hooks_failed", "hooks failed"
    CHECKED = "checked", "hooks passed"
    PUBLISHED = "published", "published"


# The constraint a second insert of a run's batch violates.
BATCH_SEQUENCE_UNIQUE = "ingest_batch_sequence_per_run"


class IngestBatch(models.Model):
    """One batch of a run: the records one ingester call fetched, staged until its hooks
    pass and it is published."""

    Status = BatchStatus

    run = models.ForeignKey(IngestRun, verbose_name="run", on_delete=models.CASCADE, related_name="batches")
    sequence = models.PositiveIntegerField("batch")
    status = models.CharField("status", max_length=12, choices=Status.choices, default=Status.FETCHED)
    records = models.PositiveIntegerField("records")
    session_in = models.JSONField(
        "session received", default=dict, blank=True, help_text="What the previous batch left for this one."
    )
    session_out = models.JSONField(
        "session handed on", default=dict, blank=True, help_text="What this batch leaves for the next one."
    )
    has_more = models.BooleanField("more to fetch")
    location = models.CharField(
        "staged records", max_length=500, help_text="Where the batch's records wait for their hooks."
    )
    fetch_ms = models.PositiveIntegerField("fetch time (ms)", default=0)
    fetched_at = models.DateTimeField("fetched")
    checked_at = models.DateTimeField("hooks finished", null=True, blank=True)
    published_at = models.DateTimeField("published", null=True, blank=True)

    class Meta:
        ordering = ["run", "sequence"]
        verbose_name = "ingest batch"
        verbose_name_plural = "ingest batches"
        constraints = [
            models.UniqueConstraint(fields=["run", "sequence"], name=BATCH_SEQUENCE_UNIQUE),
            models.CheckConstraint(name="ingest_batch_sequence_positive", condition=Q(sequence__gte=1)),
            _choices_check("ingest_batch_status_valid", "status", BatchStatus),
            models.CheckConstraint(
                name="ingest_batch_published_at_when_published",
                condition=Q(status="published", published_at__isnull=False)
                | (~Q(status="published") & Q(published_at__isnull=True)),
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.sequence} of run {self.run_id}"


class ExecutionStatus(models.TextChoices):
    WAITING = "waiting", "waiting"  # not launched yet, or backing off after a try
    LAUNCHING = "launching", "launching"  # a try's name is recorded, its start asked
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    # Ended without an outcome of its own: its run ended, or an earlier hook failed its
    # batch. The reason says which; an operator's retry makes it a new try.
    CANCELLED = "cancelled", "cancelled"


# Executions that may still launch or hold a try on the runner.
LIVE_EXECUTIONS = (ExecutionStatus.WAITING, ExecutionStatus.LAUNCHING, ExecutionStatus.RUNNING)


class HookExecution(models.Model):
    """One hook over one batch, across the tries the runner needed (a try is one Job,
    or one process)."""

    Status = ExecutionStatus

    batch = models.ForeignKey(
        IngestBatch, verbose_name="batch", on_delete=models.CASCADE, related_name="hook_executions"
    )
    hook = models.ForeignKey(
        Hook, verbose_name="hook", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    hook_name = models.CharField("hook", max_length=40)
    # The run's tenant, copied here when the execution is written: a tenant's launch
    # window counts its own executions waiting for room on a target, and with the tenant
    # on the row one partial index (ingest_hook_awaiting_room) serves that count without
    # joining batches and runs. No index of its own: nothing else looks executions up by
    # tenant.
    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    position = models.PositiveSmallIntegerField("position")
    status = models.CharField("status", max_length=10, choices=Status.choices, default=Status.WAITING)
    tries = models.PositiveIntegerField("tries", default=0)
    runner_target = models.CharField("runner", max_length=200, blank=True)
    runner_ref = models.CharField(
        "job name", max_length=63, blank=True, help_text="The Kubernetes Job (or process) of the current try."
    )
    launched_at = models.DateTimeField("launched", null=True, blank=True)
    pod_phase = models.CharField("pod phase", max_length=40, blank=True)
    exit_code = models.IntegerField("exit code", null=True, blank=True)
    reason = models.TextField("reason", blank=True)
    log_tail = models.TextField("log tail", blank=True)
    scheduled = models.BooleanField(
        "scheduled",
        default=False,
        help_text="The current try holds its place on the runner (its Pod has a node).",
    )
    finished_at = models.DateTimeField("finished", null=True, blank=True)

    class Meta:
        ordering = ["batch", "position"]
        # A tenant's launches waiting for room on a target: the launch window's count
        # (breaker._ADMIT).
        indexes = [
            models.Index(
                fields=["runner_target", "tenant"],
                name="ingest_hook_awaiting_room",
                condition=Q(status__in=["launching", "running"], scheduled=False),
            )
        ]
        constraints = [
            models.UniqueConstraint(fields=["batch", "position"], name="ingest_hook_execution_once"),
            _choices_check("ingest_hook_execution_status_valid", "status", ExecutionStatus),
        ]

    def __str__(self) -> str:
        return f"{self.hook_name} on {self.batch}"


class IngestRecord(models.Model):
    """A published record. Rows exist only for published batches: ``PublishBatch``
    writes a batch's rows in the transaction that marks it published."""

    source = models.ForeignKey(
        IngestSource, verbose_name="source", on_delete=models.CASCADE, related_name="+"
    )
    batch = models.ForeignKey(IngestBatch, verbose_name="batch", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField("position in batch")
    key = models.CharField("key", max_length=255, blank=True)
    data = models.JSONField("data")

    class Meta:
        ordering = ["batch", "position"]
        indexes = [models.Index(fields=["source", "key"], name="ingest_record_source_key")]
        constraints = [
            models.UniqueConstraint(fields=["batch", "position"], name="ingest_record_once_per_batch"),
        ]

    def __str__(self) -> str:
        return self.key or f"record {self.position} of batch {self.batch_id}"


class ActionKind(models.TextChoices):
    STARTED = "started", "started"
    CANCELLED = "cancelled", "cancelled"
    RETRIED_HOOKS = "retried_hooks", "retried failed hooks"
    RETRIED_FROM_BATCH = "retried_from_batch", "retried from the failed batch"
    FAILED = "failed", "failed"
    SUCCEEDED = "succeeded", "succeeded"


class RunAction(jobs.History):
    """What happened to a run at an operator's (or the pipeline's) hand, and who did it."""

    Kind = ActionKind

    run = models.ForeignKey(IngestRun, verbose_name="run", on_delete=models.CASCADE, related_name="actions")
    kind = models.CharField("what", max_length=20, choices=Kind.choices)

    class Meta:
        ordering = ["run", "at", "id"]
        constraints = [_choices_check("ingest_run_action_kind_valid", "kind", ActionKind)]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.run})"


class BreakerState(models.TextChoices):
    CLOSED = "closed", "closed"
    OPEN = "open", "open"
    HALF_OPEN = "half_open", "probing"


class RunnerBreaker(models.Model):
    """The circuit breaker of one tenant's hooks on one hook runner target (a cluster's
    namespace, or a host).

    Closed: hooks launch. Enough transient failures of the tenant's hooks within the
    window open it: no hook of that tenant is launched there until ``next_probe_at``,
    when one delivery (the probe) may try; its success closes the breaker, its failure
    reopens it with a doubled cool-down. Other tenants' hooks on the target go on.
    """

    State = BreakerState

    target = models.CharField("runner", max_length=200)
    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.CASCADE, related_name="+"
    )
    state = models.CharField("state", max_length=10, choices=State.choices, default=State.CLOSED)
    failures = models.PositiveIntegerField("failures in window", default=0)
    window_started_at = models.DateTimeField("window started", null=True, blank=True)
    opened_at = models.DateTimeField("opened", null=True, blank=True)
    next_probe_at = models.DateTimeField("next probe", null=True, blank=True)
    cooldown_seconds = models.FloatField("cool-down (s)", default=0)
    probe_job = models.BigIntegerField("probing delivery", null=True, blank=True)
    probe_started_at = models.DateTimeField("probe started", null=True, blank=True)
    window = models.PositiveIntegerField(
        "launch window",
        default=8,
        help_text="Launches that may wait for room at once; one more for each launch that "
        "got room, half as many after each failure.",
    )
    times_opened = models.PositiveIntegerField("times opened", default=0)
    denied = models.PositiveBigIntegerField("launches held back", default=0)
    last_failure = models.TextField("last failure", blank=True)
    updated_at = models.DateTimeField("updated", null=True, blank=True)

    class Meta:
        permissions = [("operate_runnerbreaker", "Can close runner breakers")]
        ordering = ["target", "tenant"]
        verbose_name = "hook runner breaker"
        constraints = [
            # What the breaker's statements look up and upsert on (ON CONFLICT).
            models.UniqueConstraint(fields=["target", "tenant"], name="ingest_breaker_per_target_tenant"),
            _choices_check("ingest_breaker_state_valid", "state", BreakerState),
            models.CheckConstraint(
                name="ingest_breaker_open_has_probe_time",
                condition=Q(state="closed") | Q(next_probe_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.target}, tenant {self.tenant_id}: {self.get_state_display()}"
