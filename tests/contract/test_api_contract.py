"""The API keeps its OpenAPI contract for every kind of caller, proven by schemathesis.

The schema is generated in-process (drf-spectacular, as ``/api/schema/`` serves it) and
every operation in it is exercised against the app in-process (Django's WSGI handler,
on this test's own database connection), once per identity: a platform operator, a
tenant's staff user and a tenant's member (each with a token), and nobody. Real rows
exist first (tenants, reports with modules and entries, jobs in several states, events
with deliveries, ingest runs that succeeded, failed and still run); besides
schemathesis' positive and negative cases, a third of the cases address those rows, so
the answers checked include real objects, not only 404s.

Checks on every answer: not a server error, the status code is documented, the content
type is documented, the body conforms to the documented schema, and the schema says what
the server enforces both ways: a request it calls valid is not refused with a 400 or 422
(``positive_data_acceptance``), one it calls invalid is refused (``negative_data_rejection``).
Rules OpenAPI cannot state are skipped only as ``UNSTATEABLE`` names them. Each operation
runs a bounded number of derandomized Hypothesis examples (the same cases every run); a
failing run lists the operations first, and a JUnit report per identity lands under
``var/test-artifacts/schemathesis/`` for CI.

Hypothesis drives schemathesis' strategies here rather than schemathesis' pytest plugin:
its lazy, fixture-built schemas (needed because the rows and tokens exist only inside
the test) do not run under pytest 9.2.
"""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from factors import services
from ingest.runs import services as ingest_services
from ingest.scraping import services as scraping
from jobs.events import publish
from jobs.models import Job
from tests.support.base import granted, make_job, operating, run_next, staff, tenant
from tests.support.factors.builders import module, plane_factors, report
from tests.support.ingest import builders as ingest_builders

pytestmark = pytest.mark.django_db

REPORT_DIR = Path(django_settings.BASE_DIR) / "var" / "test-artifacts" / "schemathesis"
EXAMPLES_PER_OPERATION = 40
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    positive_data_acceptance,
    negative_data_rejection,
]
# What counts as accepting a schema-valid request, and as rejecting a schema-invalid one.
# 401 and 403 are the answers of identities that may not call the operation at all; 404 an
# object the identity may not see (or that does not exist); 409 a valid request the object's
# state refuses (cancelling a finished run). None of these is a schema question. 429 is in
# neither: the test's rates stay below every throttle, so a 429 here is a defect.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {"expected-statuses": ["2xx", "3xx", 401, 403, 404, 409]},
            "negative_data_rejection": {"expected-statuses": [400, 401, 403, 404, 405, 406, 413, 415, 422]},
        },
        # PostgreSQL cannot store a NUL character, so every string the API takes (parameter,
        # field or key) refuses one with a 400; the API's description says so once, since
        # OpenAPI has no way to say it of every string at once.
        "generation": {"allow-x00": False},
    }
)


@dataclass(frozen=True)
class Unstateable:
    """A rule the server keeps that OpenAPI cannot state: a schema-valid request that
    breaks it gets a 400 naming only ``names`` (each a regular expression a named field or
    parameter matches whole), and is not counted against the schema. ``operations``
    empty: every operation that has all of ``names`` as parameters."""

    names: frozenset[str]
    reason: str
    operations: frozenset[str] = frozenset()
    identities: frozenset[str] = frozenset()  # empty: every identity

    def waives(self, case: schemathesis.Case, identity: str, named: set[str]) -> bool:
        if not named or not all(any(re.fullmatch(name, found) for name in self.names) for found in named):
            return False
        if self.identities and identity not in self.identities:
            return False
        if self.operations:
            return case.operation.label in self.operations
        parameters = {p.name for p in case.operation.iter_parameters()}
        return self.names <= parameters


def rule(names: str, reason: str, operations: str = "", identities: str = "") -> Unstateable:
    return Unstateable(
        frozenset(names.split()),
        reason,
        frozenset(filter(None, operations.split(";"))),
        frozenset(identities.split()),
    )


REFUSED_FILE = "detail rows_checked rows error_count errors errors_truncated"
ENTRIES = "/v1/carbon_reports/{report}/modules/{module}/data-entries"
UNSTATEABLE = [
    rule(
        "cursor",
        "An opaque value the listing wrote into its own next or previous link; "
        "what it encodes is the server's, so no schema can tell a good one.",
    ),
    # Rows that must exist and be the caller's: a schema describes values, not the database.
    rule(
        "mapping",
        "Names a mapping the caller may see (platform operators by id: names are "
        "unique within a tenant only).",
        "POST /api/exports/snapshots/",
    ),
    rule(
        "source",
        "Names a source the caller may see, and its tenant too when several tenants have the name.",
        "POST /api/ingest/runs/",
    ),
    rule(
        "tenant",
        "A platform operator names the tenant of a source whose name several tenants have.",
        "GET /scraping/{source}/handoffs;POST /scraping/{source}/sync;"
        "POST /scraping/{source}/handoffs/redrive",
        identities="operator",
    ),
    rule("tenant", "A platform operator's tenant must exist.", "POST /api/jobs/", identities="operator"),
    # Rules about the caller, not the request: the schema is the same for everyone.
    rule(
        "queue tenant",
        "Only platform operators choose a job's queue or tenant.",
        "POST /api/jobs/",
        identities="tenant_staff tenant_member",
    ),
    # Rules across fields, each stated in the operation's description.
    rule("payload", "Its shape is the job type's own (the type field says which).", "POST /api/jobs/"),
    rule(
        "data_entry_type unit classification",
        "The type must be one of the module's (a path parameter); the unit and the "
        "classification's keys and codes are the type's.",
        f"POST {ENTRIES};PATCH {ENTRIES}/{{entry}}",
    ),
    rule(
        "data_entry_type",
        "The type must be one of the module's.",
        "POST /sync/dispatch;POST /sync/api-ingest",
    ),
    rule(
        "url source",
        "The URL's host must be one the outbound rules allow (resolved when the "
        "request arrives); a unit sync needs a file or a URL.",
        "POST /sync/api-ingest;POST /sync/units",
    ),
    rule(
        r"references\[\d+\]\.external_id",
        "Each reference's external_id comes once per sync.",
        "POST /scraping/{source}/sync",
    ),
    rule(
        REFUSED_FILE,
        "An uploaded file's rows are checked against its kind's CSV rules, "
        "row by row: the answer lists the first errors.",
        "POST /sync/dispatch;POST /sync/factors/{data_entry_type};POST /sync/units",
    ),
]
PATH_PARAMETER = re.compile(r"{(\w+)}")
XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# --- the world the run starts from ---------------------------------------------------------


@dataclass(frozen=True)
class World:
    """The rows the run starts from, and a token per identity (none: anonymous)."""

    tokens: dict[str, str]
    known: dict[str, list[Any]]  # path parameter values that name real rows

    def values(self, path: str, name: str) -> list[Any]:
        if name == "id":
            if path.startswith("/api/ingest/runs/"):
                return self.known["runs"]
            if path.startswith("/api/exports/snapshots/"):
                return self.known["snapshots"]
            if path.startswith("/api/exports/mappings/"):
                return self.known["mappings"]
            return self.known["events" if path.startswith("/api/events/") else "jobs"]
        return self.known[name]


def build_world() -> World:
    acme, globex = tenant("Acme"), tenant("Globex")
    # Staff may operate everything and create what the API creates (jobs, snapshots,
    # scraped references; a run's start is an operation), as the admin would let them.
    creates = ("jobs.add_job", "exports.add_snapshot", "ingest.add_scrapereference")
    users = {
        "operator": granted(operating(staff("olga", operator=True)), *creates),
        "tenant_staff": granted(operating(staff("alice", of=acme)), *creates),
        "tenant_member": staff("bob", of=acme, is_staff=False),
    }
    plane_factors()
    reports = [report("ACME1", tenant=acme), report("GLOB1", tenant=globex)]
    entry = {
        "data_entry_type": "plane",
        "quantity": "12.5",
        "classification": {"haul": "short", "cabin": "economy"},
    }
    entries = [services.create_entry(module(r).pk, entry, actor=users["tenant_staff"]).entry for r in reports]
    jobs = [
        make_job("tests.crash", tenant=acme),
        make_job("tests.noop", tenant=acme),
        make_job("tests.permanent", tenant=globex),
    ]
    events = [publish("OrderPlaced", {"order": 1}, tenant=acme), publish("Crashing", {}, tenant=globex)]
    runs = [
        ingest_services.start_ingest(ingest_builders.source(acme, "orders", batches=2)),
        ingest_services.start_ingest(
            ingest_builders.source(
                acme, "checked", batches=1, hooks=[ingest_builders.exit_with(1)], max_failures=1
            )
        ),
        ingest_services.start_ingest(ingest_builders.source(globex, "orders", batches=1)),
    ]
    while Job.objects.filter(state=Job.State.PENDING, attempts=0).exists():
        run_next()  # one failure with a traceback, one success, one permanent failure, deliveries
    jobs.append(make_job("tests.noop", tenant=acme))  # and one still pending
    runs.append(ingest_services.start_ingest(ingest_builders.source(acme, "invoices")))  # running
    listings = ingest_builders.source(acme, "listings", kind="scraped_reference", config={})
    scraping.sync(
        listings, "scrape-1", [{"external_id": "a", "payload": {"price": 1}}], actor=users["tenant_staff"]
    )
    snapshots = _snapshots(acme, globex)
    return World(
        tokens={name: Token.objects.create(user=user).key for name, user in users.items()},
        known={
            "jobs": list(Job.objects.values_list("pk", flat=True)),
            "events": [event.pk for event in events],
            "runs": [run.pk for run in runs],
            "report": [r.pk for r in reports],
            "module": ["travel", "energy"],
            "entry": [e.pk for e in entries if e is not None],
            "data_entry_type": ["plane", "train"],
            "pipeline_id": [str(job.pipeline_id) for job in jobs],
            "source": ["listings", "orders"],
            "snapshots": [snap.pk for snap in snapshots],
            "mappings": sorted({snap.mapping_id for snap in snapshots}),
        },
    )


def _snapshots(acme: Any, globex: Any) -> list[Any]:
    """Snapshots in each state: one exporting (a job completed, one submitted, one
    claimed), one failed, and one of another tenant's; their jobs run as the export
    workers run them, through the engine's remote-worker calls."""
    from exports import services as exports
    from exports.models import Mapping, MappingEntity
    from tests.support.exports.builders import claim_jobs
    from tests.support.exports.builders import report as report_export

    made = []
    for owner, name in ((acme, "graph"), (acme, "other"), (globex, "graph")):
        mapping = Mapping.objects.create(tenant=owner, name=name)
        for position, dataset in enumerate(("units", "emission_factors", "data_entries")):
            MappingEntity.objects.create(
                mapping=mapping, kind="node", name=dataset, position=position, dataset=dataset, columns=["id"]
            )
        made.append(exports.create_snapshot(mapping))
    # One claim, in claim order: the first snapshot's jobs, then the second's.
    done, submitted, _, *others = claim_jobs("contract", 6)
    report_export(done, "completed", row_count=3, size_bytes=10, files=("part-g1.parquet",))
    report_export(submitted, "submitted", query_id="q1")
    for job in others:
        report_export(job, "failed", error_message="boom")
    assert [sorted(snap.jobs.values_list("status", flat=True)) for snap in made] == [
        ["claimed", "completed", "submitted"],
        ["failed", "failed", "failed"],
        ["pending", "pending", "pending"],
    ]
    return made


# --- one run per identity ----------------------------------------------------------------------


@dataclass
class OperationResult:
    label: str
    seconds: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    waived: int = 0  # schema-valid requests refused by a rule in UNSTATEABLE
    failure: str | None = None


def cases(operation: Any, world: World) -> st.SearchStrategy[schemathesis.Case]:
    """Schemathesis' positive and negative cases, and positive ones addressing real rows."""
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    names = PATH_PARAMETER.findall(operation.path)
    if names:
        known = [
            dict(zip(names, values, strict=True))
            for values in product(*(world.values(operation.path, name) for name in names))
        ]
        strategies.append(
            st.sampled_from(known).flatmap(
                lambda path: operation.as_strategy(GenerationMode.POSITIVE, path_parameters=path)
            )
        )
    return st.one_of(strategies)


def exercise(operation: Any, world: World, identity: str) -> OperationResult:
    result = OperationResult(operation.label)
    token = world.tokens.get(identity)
    headers = {"Authorization": f"Token {token}"} if token else {}

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )
    @given(case=cases(operation, world))
    def check(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        result.statuses[response.status_code] += 1
        excluded = []
        if waived(case, response, identity):
            result.waived += 1
            excluded.append(positive_data_acceptance)
        case.validate_response(response, checks=CHECKS, excluded_checks=excluded, headers=headers)

    started = time.perf_counter()
    try:
        check()
    except (Exception, BaseExceptionGroup) as failure:  # the report names it; the test fails below
        result.failure = f"{type(failure).__name__}: {failure}"
    result.seconds = time.perf_counter() - started
    return result


def waived(case: schemathesis.Case, response: Any, identity: str) -> bool:
    """Whether a schema-valid request's 400 names only what an ``UNSTATEABLE`` rule covers."""
    if response.status_code != 400 or case.meta is None or not case.meta.generation.mode.is_positive:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    named = set(body) if isinstance(body, dict) else set()
    return any(rule.waives(case, identity, named) for rule in UNSTATEABLE)


def operations(schema: Any) -> Iterator[Any]:
    for found in schema.get_all_operations():
        yield found.ok()


def write_junit(identity: str, results: list[OperationResult]) -> Path:
    suite = ET.Element(
        "testsuite",
        name=f"schemathesis[{identity}]",
        tests=str(len(results)),
        failures=str(sum(r.failure is not None for r in results)),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"api_contract.{identity}",
            name=result.label,
            time=f"{result.seconds:.3f}",
        )
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(result.statuses.items()))
        ET.SubElement(
            case, "system-out"
        ).text = f"answers by status: {statuses}; refused by a rule the schema cannot state: {result.waived}"
        if result.failure is not None:
            failure = xml_text(result.failure)
            ET.SubElement(case, "failure", message=failure.splitlines()[0][:200]).text = failure
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    path = REPORT_DIR / f"{identity}.xml"
    tree = ET.ElementTree(ET.Element("testsuites", name="api-contract"))
    tree.getroot().append(suite)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path


def xml_text(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot hold (a failure quotes generated
    data, control characters included)."""
    return XML_INVALID.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


@pytest.fixture
def connection_kept_open() -> Iterator[None]:
    """The app runs on this test's connection, inside its transaction; Django closes the
    connection after each request unless told otherwise (its own test client does this)."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.mark.parametrize("identity", ["operator", "tenant_staff", "tenant_member", "anonymous"])
@pytest.mark.usefixtures("connection_kept_open")
def test_every_operation_keeps_its_contract(identity: str) -> None:
    world = build_world()
    schema = schemathesis.openapi.from_dict(
        SchemaGenerator().get_schema(request=None, public=True), config=CONFIG
    )
    schema.app = WSGIHandler()

    results = [exercise(operation, world, identity) for operation in operations(schema)]

    report = write_junit(identity, results)
    failed = [r for r in results if r.failure is not None]
    assert not failed, (
        f"{len(failed)} operation(s) broke the contract (report: {report}):\n"
        + "".join(f"  {r.label}\n" for r in failed)
        + "\n"
        + "\n\n".join(f"{r.label}\n{r.failure}" for r in failed)
    )
    assert sum(sum(r.statuses.values()) for r in results) >= len(results) * 10
