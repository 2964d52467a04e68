"""Enqueue stores exactly what it was given, or refuses it naming the argument: never a
database error, never a silent change, and nothing written when it refuses."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jobs import engine, events, registry
from jobs.context import JobContext
from jobs.errors import InvalidArgument, InvalidPayload, UnknownJobType
from jobs.models import Event, Job
from jobs.testing import T0
from tests.support.base import make_job, staff, tenant

pytestmark = pytest.mark.django_db


def nested(depth: int) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    for _ in range(depth - 1):
        payload = {"a": payload}
    return payload


def containing_itself() -> dict[str, Any]:
    payload: dict[str, Any] = {}
    payload["me"] = payload
    return payload


# --- each refusal, by name ---------------------------------------------------------------------

REFUSED = [
    # (options, argument named, words of the message)
    ({"payload": {"x": float("nan")}}, "payload", "NaN or Infinity"),
    ({"payload": {"x": [1, float("-inf")]}}, "payload", "NaN or Infinity"),
    ({"payload": {"x": "a\x00b"}}, "payload", 'payload["x"] holds a NUL character'),
    ({"payload": {"ok": {"a\x00": 1}}}, "payload", 'payload["ok"] has a key that holds a NUL'),
    ({"payload": {"x": ["\udc80"]}}, "payload", 'payload["x"][0] holds a lone surrogate (U+DC80'),
    ({"payload": {"\ud800": 1}}, "payload", "has a key that holds a lone surrogate"),
    # Two surrogate code points would come back as the one character they encode.
    ({"payload": {"x": "\ud83d\ude00"}}, "payload", "lone surrogate"),
    ({"payload": 0}, "payload", "must be a JSON object (a dict), got int 0"),
    ({"payload": []}, "payload", "got list []"),
    ({"payload": [1, 2]}, "payload", "got list [1, 2]"),
    ({"payload": "text"}, "payload", "got str 'text'"),
    ({"payload": {1: "a"}}, "payload", "has the key 1 (int); JSON object keys are strings"),
    ({"payload": {"when": object()}}, "payload", "holds a value JSON cannot store"),
    ({"payload": nested(5_000)}, "payload", "nested deeper than 64 levels"),
    ({"payload": nested(65)}, "payload", "nested deeper than 64 levels"),
    ({"payload": containing_itself()}, "payload", "contains itself"),
    ({"run_after": timedelta(hours=1)}, "run_after", "for a delay, pass jobs.clock.now() +"),
    ({"run_after": 3600}, "run_after", "must be an aware datetime, got int 3600"),
    ({"run_after": 1.5}, "run_after", "must be an aware datetime"),
    ({"run_after": datetime(2026, 11, 2, 9, 0)}, "run_after", "naive datetime"),
    ({"run_after": date(2026, 11, 2)}, "run_after", "got date"),
    ({"run_after": "2026-11-02T09:00:00Z"}, "run_after", "got str"),
    ({"priority": 40_000}, "priority", "40000 is outside -32768..32767"),
    ({"priority": -40_000}, "priority", "outside -32768..32767"),
    ({"priority": True}, "priority", "must be an integer, got bool"),
    ({"priority": 1.5}, "priority", "must be an integer, got float"),
    ({"priority": None}, "priority", "must be an integer, got NoneType"),
    ({"queue": ""}, "queue", "must not be empty (None means the handler's queue)"),
    ({"queue": "q" * 51}, "queue", "51 characters long; at most 50 fit"),
    ({"queue": 7}, "queue", "must be a string, got int 7"),
    ({"queue": "bulk\x00"}, "queue", "NUL character"),
    ({"unique_key": 7}, "unique_key", "must be a string, got int 7"),
    ({"unique_key": ""}, "unique_key", "must not be empty (None means no key)"),
    ({"unique_key": "k" * 201}, "unique_key", "201 characters long; at most 200 fit"),
    ({"concurrency_key": 42}, "concurrency_key", "must be a string, got int 42"),
    ({"concurrency_key": "k\udc80"}, "concurrency_key", "lone surrogate"),
    ({"pending_key": b"k"}, "pending_key", "must be a string, got bytes"),
    ({"pipeline": "not-a-uuid"}, "pipeline", "must be a UUID, got str 'not-a-uuid'"),
    ({"pipeline": 123}, "pipeline", "must be a UUID, got int 123"),
    ({"pipeline": ""}, "pipeline", "must be a UUID"),
    ({"parent": 987_654}, "parent", "parent 987654 does not exist"),
    ({"parent": "12"}, "parent", "must be a job or its id, got str '12'"),
    ({"parent": Job(type="tests.noop")}, "parent", "is an unsaved job"),
    ({"tenant": 424_242}, "tenant", "tenant 424242 does not exist"),
    ({"tenant": 2**70}, "tenant", "does not exist"),
    ({"tenant": "acme"}, "tenant", "must be a tenant or its id"),
    ({"created_by": 424_242}, "created_by", "created_by 424242 does not exist"),
    ({"created_by": 2**40}, "created_by", "does not exist"),
    ({"max_attempts": 0}, "max_attempts", "must be at least 1, got 0 (None means the handler"),
    ({"max_attempts": -1}, "max_attempts", "must be at least 1, got -1"),
    ({"max_attempts": True}, "max_attempts", "must be an integer, got bool"),
    ({"max_attempts": 2**31}, "max_attempts", "outside 1..2147483647"),
]


@pytest.mark.parametrize(
    ("options", "argument", "words"), REFUSED, ids=[f"{arg}-{i}" for i, (_, arg, _) in enumerate(REFUSED)]
)
def test_it_refuses_a_bad_argument_by_name_and_writes_nothing(options, argument, words):
    options = {"payload": {}, **options}
    with pytest.raises(InvalidArgument) as refused:
        engine.enqueue("tests.noop", options.pop("payload"), **options)

    assert refused.value.argument == argument
    assert str(refused.value).startswith(argument)
    assert words in str(refused.value)
    assert not Job.objects.exists()  # and the transaction is still usable


def test_a_payload_error_is_an_invalid_payload_and_a_value_error():
    with pytest.raises(InvalidPayload) as refused:
        engine.enqueue("tests.noop", {"x": float("nan")})
    assert isinstance(refused.value, ValueError)


def test_a_name_that_is_no_registered_type_is_refused():
    for name in ("tests.nope", 5, None):
        with pytest.raises(UnknownJobType):
            engine.enqueue(name, {})
    assert not Job.objects.exists()


def test_a_tenant_of_the_wrong_model_is_refused_rather_than_read_as_an_id():
    user = staff("olga")
    with pytest.raises(InvalidArgument, match="tenant must be a tenant or its id, got User"):
        engine.enqueue("tests.noop", {}, tenant=user)


# --- what is accepted is stored as given -------------------------------------------------------


@pytest.mark.parametrize(
    "offset",
    [timedelta(hours=14), timedelta(hours=-12), timedelta(hours=20, minutes=30), timedelta(seconds=-1)],
)
def test_an_aware_run_after_is_stored_as_the_same_instant_whatever_its_offset(offset):
    # PostgreSQL refuses offsets beyond ±15:59 that Python allows: the engine sends UTC.
    when = datetime(2026, 11, 2, 9, 0, 0, 123_456, tzinfo=timezone(offset))
    job = make_job(run_after=when)
    job.refresh_from_db()
    assert job.run_after == when


@pytest.mark.parametrize(
    "payload",
    [
        {"text": "\\u0000 is not a NUL: it is six characters"},
        {"emoji": "😀", "cjk": "碳", "key 😀": True},
        nested(64),
        {"big": 2**100, "small": -(2**70), "float": 0.1, "exp": 1.5e-300},
    ],
)
def test_payloads_at_the_edges_are_stored_unchanged(payload):
    job = make_job(payload=payload)
    job.refresh_from_db()
    assert job.payload == payload


def test_a_tuple_in_a_payload_is_stored_as_a_json_array():
    job = make_job(payload={"years": (2024, 2025)})
    job.refresh_from_db()
    assert job.payload == {"years": [2024, 2025]}


def test_a_pipeline_may_be_given_as_the_text_of_a_uuid():
    pipeline = uuid.uuid4()
    job = make_job(pipeline=str(pipeline).upper())
    assert job.pipeline_id == pipeline


def test_none_means_the_default_for_every_option(clock):
    job = engine.enqueue(
        "tests.flaky",
        None,
        run_after=None,
        queue=None,
        max_attempts=None,
        created_by=None,
        tenant=None,
        parent=None,
        pipeline=None,
    )
    assert (job.payload, job.run_after, job.queue, job.max_attempts) == ({}, T0, "default", 4)


# --- enqueue_many, ctx.chain and publish check the same way ------------------------------------


def test_enqueue_many_refuses_a_batch_with_one_bad_payload_naming_its_index():
    with pytest.raises(InvalidPayload, match=r"payloads\[2\] must be a JSON object"):
        engine.enqueue_many("tests.noop", [{}, {}, [1, 2]])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"unique_keys": ["a"]}, "unique_keys"),
        ({"pending_keys": "ab"}, "pending_keys"),
        ({"pending_keys": ["a", 2]}, "pending_key"),
        ({"tenant": 424_242}, "tenant"),
        ({"parent": 987_654}, "parent"),
        ({"priority": 2**20}, "priority"),
    ],
)
def test_enqueue_many_refuses_bad_options_by_name(options, argument):
    with pytest.raises(InvalidArgument) as refused:
        engine.enqueue_many("tests.noop", [{}, {}], **options)
    assert refused.value.argument == argument
    assert not Job.objects.exists()


def test_enqueue_many_refuses_a_mapping_for_its_payloads():
    with pytest.raises(InvalidArgument, match="payloads must be a sequence of payloads, got dict"):
        engine.enqueue_many("tests.noop", {"n": 1})


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"run_after": timedelta(minutes=5)}, "run_after"),
        ({"pending_key": 7}, "pending_key"),
        ({"payload": {"x": float("inf")}}, "payload"),
    ],
)
def test_a_bad_child_fails_the_handler_that_chains_it_not_its_success_later(options, argument, clock):
    ctx = JobContext(job=make_job(), clock=clock)
    payload = options.pop("payload", {})
    with pytest.raises(InvalidArgument) as refused:
        ctx.chain("tests.noop", payload, **options)
    assert refused.value.argument == argument
    assert ctx.children == []


def test_a_chained_child_with_an_unknown_option_fails_at_the_chain():
    ctx = JobContext(job=make_job(), clock=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priorty"):
        ctx.chain("tests.noop", {}, priorty=5)


@pytest.fixture
def subscriber():
    registry.register(
        registry.Handler(name="tests.on_checked", func=lambda ctx: None, subscribes=("Checked",))
    )
    yield
    registry.unregister("tests.on_checked")


@pytest.mark.parametrize(
    ("args", "options", "argument"),
    [
        (("Checked", {"x": float("nan")}), {}, "payload"),
        (("Checked", []), {}, "payload"),
        (("Checked", nested(64)), {}, "payload"),  # its delivery wraps it in one more level
        (("Checked", {}), {"tenant": 424_242}, "tenant"),
        (("Checked", {}), {"pipeline": "nope"}, "pipeline"),
        (("x" * 101, {}), {}, "name"),
        ((7, {}), {}, "name"),
    ],
)
def test_publish_refuses_bad_arguments_by_name_and_writes_nothing(subscriber, args, options, argument):
    with pytest.raises(InvalidArgument) as refused:
        events.publish(*args, **options)
    assert refused.value.argument == argument
    assert not Event.objects.exists() and not Job.objects.exists()


def test_publish_with_a_63_deep_payload_delivers_it(subscriber):
    events.publish("Checked", nested(63))
    assert Job.objects.get().payload["payload"] == nested(63)


# --- properties --------------------------------------------------------------------------------

# Any character, with the ones PostgreSQL refuses (NUL, surrogates) drawn often.
characters = st.one_of(st.characters(), st.sampled_from(["\x00", "\ud800", "\udfff", "\\"]))
texts = st.text(characters, max_size=12)
long_texts = st.text(characters, max_size=220)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | texts
object_keys = texts | st.integers() | st.booleans()
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(object_keys, children, max_size=4)
    ),
    max_leaves=16,
)
payloads = (
    st.dictionaries(object_keys, json_values, max_size=5) | json_values | st.integers(1, 120).map(nested)
)
offsets = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59))
aware = st.datetimes(timezones=st.just(UTC) | offsets.map(timezone))
run_afters = aware | st.datetimes() | st.timedeltas() | st.integers() | st.floats() | st.dates() | texts
numbers = st.integers() | st.booleans() | st.floats() | texts
keys = long_texts | st.integers() | st.binary(max_size=3)
pipelines = st.uuids() | st.uuids().map(str) | texts | st.integers()
# Rows an argument may name, resolved inside each example (their rows are made there).
references = st.sampled_from(["row", "id", "missing", "wrong"]) | st.integers()

ARGUMENTS = {
    "payload": payloads,
    "run_after": run_afters,
    "priority": numbers,
    "queue": texts,
    "unique_key": keys,
    "pending_key": keys,
    "concurrency_key": keys,
    "pipeline": pipelines,
    "parent": references,
    "tenant": references,
    "created_by": references,
    "max_attempts": numbers,
}
NOT_GIVEN: dict[str, Any] = {
    "payload": {},
    "priority": 0,
    "queue": "default",
    "unique_key": None,
    "pending_key": None,
    "concurrency_key": None,
    "parent": None,
    "tenant": None,
    "created_by": None,
    "max_attempts": 3,
}
FOUND_BY = {
    "parent": "parent_id",
    "tenant": "tenant_id",
    "created_by": "created_by_id",
    "pipeline": "pipeline_id",
}


def resolve(argument: str, value: Any) -> Any:
    """A reference drawn as a word: the row itself, its id, an id nobody has, or a row
    of another model."""
    if argument not in ("parent", "tenant", "created_by") or not isinstance(value, str):
        return value
    make = {
        "parent": lambda: make_job(),
        "tenant": lambda: tenant(f"T{uuid.uuid4().hex[:8]}"),
        "created_by": lambda: User.objects.create(username=uuid.uuid4().hex),
    }[argument]
    if value == "missing":
        return 2_000_000_000
    if value == "wrong":
        return make_job() if argument != "parent" else tenant("Wrong")
    row = make()
    return row if value == "row" else row.pk


def same_json(given: Any, stored: Any) -> bool:
    """Whether ``stored`` is ``given`` after a trip through JSON: a tuple is an array, and
    a number is a JSON number (a float like 1e23 is read back as the integer it writes)."""
    if isinstance(given, bool) or given is None or isinstance(given, str):
        return type(stored) is type(given) and stored == given
    if isinstance(given, float):
        return not isinstance(stored, bool) and isinstance(stored, int | float) and (float(stored) == given)
    if isinstance(given, int):
        return type(stored) is int and stored == given
    if isinstance(given, list | tuple):
        return (
            isinstance(stored, list)
            and len(stored) == len(given)
            and all(same_json(a, b) for a, b in zip(given, stored, strict=True))
        )
    return (
        isinstance(stored, dict)
        and stored.keys() == given.keys()
        and all(same_json(value, stored[name]) for name, value in given.items())
    )


def expected(argument: str, value: Any) -> Any:
    if argument in FOUND_BY:
        if argument == "pipeline":
            return uuid.UUID(str(value))
        return getattr(value, "pk", value)
    return value


def stored_as_given(job: Job, given: dict[str, Any]) -> None:
    job = Job.objects.get(pk=job.pk)
    for argument, value in {**NOT_GIVEN, **given}.items():
        if argument == "payload":
            assert same_json({} if value is None else value, job.payload), (value, job.payload)
        elif argument == "run_after":
            assert job.run_after == value
        else:
            assert getattr(job, FOUND_BY.get(argument, argument)) == expected(argument, value)


def enqueue_or_refuse(given: dict[str, Any]) -> None:
    """The property: stored exactly as given, or refused by name with nothing written."""
    with transaction.atomic():  # each example starts from an empty table
        given = {argument: resolve(argument, value) for argument, value in given.items()}
        options = {**given}
        before = Job.objects.count()
        try:
            job = engine.enqueue("tests.noop", options.pop("payload", {}), **options)
        except InvalidArgument as refused:
            event(f"refused: {refused.argument}")
            assert refused.argument in ARGUMENTS
            assert str(refused).startswith(refused.argument)
            assert Job.objects.count() == before
        else:
            event("stored")
            stored_as_given(job, given)
        transaction.set_rollback(True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(given=st.fixed_dictionaries({}, optional=ARGUMENTS))
def test_enqueue_stores_exactly_what_it_is_given_or_refuses_it_by_name(given):
    enqueue_or_refuse(given)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), argument=st.sampled_from(sorted(ARGUMENTS)))
def test_any_value_of_one_argument_is_stored_as_given_or_refused_by_name(data, argument):
    enqueue_or_refuse({argument: data.draw(ARGUMENTS[argument], label=argument)})


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(payloads, max_size=4))
def test_enqueue_many_stores_every_payload_as_given_or_refuses_the_batch(batch):
    with transaction.atomic():
        try:
            ids = engine.enqueue_many("tests.noop", batch)
        except InvalidPayload as refused:
            assert refused.argument.startswith("payloads[")
            assert not Job.objects.exists()
        else:
            stored = dict(Job.objects.filter(pk__in=ids).values_list("pk", "payload"))
            assert all(same_json(p, stored[pk]) for p, pk in zip(batch, sorted(ids), strict=True))
        transaction.set_rollback(True)
