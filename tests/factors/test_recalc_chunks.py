"""Emissions computed while an ingest loads: chunks queued with their batches, and the
recalculation that closes the ingest (``factors.recalc_chunks``)."""

from __future__ import annotations

import pytest

import jobs
from factors import emissions, recalc_chunks
from factors.models import DataEntry, Emission, EntryLoad, LoadChunk
from factors.stats import amount
from jobs.models import Dependency, Job
from jobs.testing import T0
from jobs.worker import run_until_idle
from tests.support.factors.builders import (
    PLANE_FACTORS,
    csv_bytes,
    dispatch,
    expected_totals,
    module,
    plane_factors,
    plane_rows,
    report,
)

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]


@pytest.fixture
def small_chunks(settings):
    settings.FACTORS_INGEST_BATCH_ROWS = 1_000
    settings.FACTORS_RECALC_CHUNK_ROWS = 3_000


def _pipeline(started) -> list[Job]:
    return list(Job.objects.filter(pipeline_id=started.pipeline_id).order_by("id"))


def test_chunks_are_queued_as_the_load_goes_and_the_closing_recalc_takes_the_tail(clock, small_chunks):
    plane_factors(skip=[("long", "business")])
    travel = module(report())
    rows = plane_rows(12_345)
    started = dispatch(travel, csv_bytes(HEADER, rows))

    run_until_idle()

    pipeline = _pipeline(started)
    ingest = pipeline[0]
    chunks = [j for j in pipeline if "chunk_of" in j.payload]
    closing = [j for j in pipeline if "closes" in j.payload]
    assert [j.state for j in pipeline] == ["succeeded"] * len(pipeline)
    assert len(chunks) == 4  # after rows 3,000, 6,000, 9,000 and 12,000
    assert all(c.payload["chunk_of"] == ingest.pk and c.parent_id is None for c in chunks)
    # Contiguous id ranges, each holding exactly the rows of its chunk.
    ranges = [emissions.Scope.from_payload(c.payload) for c in chunks]
    assert all(a.upto == b.after for a, b in zip(ranges, ranges[1:], strict=False))
    assert [c.result["entries"] for c in chunks] == [3_000] * 4
    assert len(closing) == 1 and closing[0].parent_id == ingest.pk
    # The closing recalculation waited on every chunk: a fan-in, recorded as such.
    assert set(Dependency.objects.filter(waiter=closing[0]).values_list("prerequisite_id", flat=True)) == {
        c.pk for c in chunks
    }
    assert closing[0].result["entries"] == 345
    aggregations = [j for j in pipeline if j.type == "factors.aggregation"]
    # Queued by the switch, in the pipeline but not as the closing job's child: it runs
    # even if the closing job fails after the switch.
    assert len(aggregations) == 1 and aggregations[0].parent_id is None
    assert aggregations[0].id > closing[0].id

    known = {key: value for key, value in PLANE_FACTORS.items() if key != ("long", "business")}
    count, quantity, kg, missing = expected_totals(rows, known)
    travel.refresh_from_db()
    assert travel.stats["entries"] == count and travel.stats["kg_co2e"] == amount(kg)
    assert travel.stats["without_factor"] == missing
    assert Emission.objects.filter(data_entry__module=travel).count() == count - missing


def test_a_file_smaller_than_a_chunk_queues_none(clock, small_chunks):
    plane_factors()
    started = dispatch(module(report()), csv_bytes(HEADER, plane_rows(2_500)))
    run_until_idle()
    assert [j.type for j in _pipeline(started)] == [
        "factors.csv_ingest",
        "factors.emission_recalc",
        "factors.aggregation",
    ]


def test_chunking_can_be_switched_off(clock, settings):
    settings.FACTORS_INGEST_BATCH_ROWS = 1_000
    settings.FACTORS_RECALC_CHUNK_ROWS = 0
    plane_factors()
    started = dispatch(module(report()), csv_bytes(HEADER, plane_rows(5_000)))
    run_until_idle()
    pipeline = _pipeline(started)
    assert [j.type for j in pipeline] == [
        "factors.csv_ingest",
        "factors.emission_recalc",
        "factors.aggregation",
    ]
    assert pipeline[1].result["entries"] == 5_000


# --- the closing recalculation's fan-in ---------------------------------------------------------


def _ingest(clock) -> Job:
    travel = module(report())
    ingest = jobs.enqueue(
        "factors.csv_ingest",
        {"module": travel.pk, "data_entry_type": "plane", "year": 2024, "source": "csv", "upload": {}},
    )
    EntryLoad.objects.create(job_id=ingest.pk, module=travel, data_entry_type="plane", source="csv")
    return ingest


def _chunk(clock, ingest: Job, after: int, upto: int, *, state: str = "pending") -> Job:
    """A chunk of ``ingest``'s load, queued as the ingest queues one, in ``state``."""
    scope = emissions.Scope("plane", ingest.payload["module"], after=after, upto=upto)
    job = jobs.enqueue(
        "factors.emission_recalc", {**scope.payload(), "chunk_of": ingest.pk}, pipeline=ingest.pipeline_id
    )
    LoadChunk.objects.create(load_id=ingest.pk, job_id=job.pk, after=after, upto=upto)
    finished = {"finished_at": clock.now()} if state not in Job.UNFINISHED else {}
    Job.objects.filter(pk=job.pk).update(state=state, **finished)
    return job


def _closer(ingest: Job) -> Job:
    """The closing recalculation, enqueued as the ingest chains it: after its chunks."""
    scope = emissions.Scope("plane", module_id=ingest.payload["module"])
    return jobs.enqueue(
        "factors.emission_recalc",
        recalc_chunks.closing_payload(scope, ingest),
        pipeline=ingest.pipeline_id,
        after=recalc_chunks.chunk_jobs(ingest.pk),
    )


def _closing_scope(clock, closer: Job) -> emissions.Scope:
    return recalc_chunks.closing_scope(
        jobs.JobContext(closer, clock), emissions.Scope.from_payload(closer.payload)
    )


def test_the_closer_is_not_claimed_while_a_chunk_is_unfinished(clock):
    ingest = _ingest(clock)
    _chunk(clock, ingest, 0, 100, state="succeeded")
    late = _chunk(clock, ingest, 100, 200)  # pending: in a backoff, say
    closer = _closer(ingest)
    claimable = Job.objects.claimable(clock.now(), ["factors.emission_recalc"], [])

    assert closer.pk not in claimable.values_list("id", flat=True)
    assert jobs.explain(closer).endswith(f"to finish: {late.pk}")
    Job.objects.filter(pk=late.pk).update(state="failed", finished_at=clock.now())
    assert closer.pk in claimable.values_list("id", flat=True)


def test_the_closer_starts_after_the_last_succeeded_chunk(clock):
    ingest = _ingest(clock)
    _chunk(clock, ingest, 0, 100, state="succeeded")
    _chunk(clock, ingest, 100, 200, state="succeeded")
    scope = _closing_scope(clock, _closer(ingest))
    assert (scope.after, scope.upto, scope.module_id) == (200, None, ingest.payload["module"])


def test_the_closer_covers_a_chunk_that_did_not_succeed(clock):
    ingest = _ingest(clock)
    _chunk(clock, ingest, 0, 100, state="succeeded")
    _chunk(clock, ingest, 100, 200, state="failed")
    _chunk(clock, ingest, 200, 300, state="succeeded")
    scope = _closing_scope(clock, _closer(ingest))
    assert (scope.after, scope.upto) == (100, None)


def test_without_chunks_the_closer_covers_the_whole_module(clock):
    scope = _closing_scope(clock, _closer(_ingest(clock)))
    assert (scope.after, scope.upto) == (0, None)


def test_a_failed_chunk_is_recomputed_by_the_closer_and_stats_end_right(clock, small_chunks):
    """A chunk that fails for good leaves its range to the closing recalculation."""
    plane_factors()
    travel = module(report())
    rows = plane_rows(7_000)
    started = dispatch(travel, csv_bytes(HEADER, rows))
    assert run_until_idle(max_rounds=1) == 1  # the ingest only: its chunks are queued
    first = (
        Job.objects.filter(pipeline_id=started.pipeline_id, payload__has_key="chunk_of")
        .order_by("id")
        .first()
    )
    jobs.cancel(first, reason="lost chunk")

    run_until_idle()

    count, quantity, kg, missing = expected_totals(rows)
    travel.refresh_from_db()
    assert travel.stats["entries"] == count and travel.stats["kg_co2e"] == amount(kg)
    assert DataEntry.objects.filter(module=travel, emission__isnull=True).count() == missing
    closing = Job.objects.get(pipeline_id=started.pipeline_id, payload__has_key="closes")
    assert closing.result["entries"] == 7_000  # from the cancelled chunk's first id on


# --- chunks across attempts ---------------------------------------------------------------------


def _queue(ingest: Job) -> recalc_chunks.ChunkQueue:
    queue = recalc_chunks.ChunkQueue(ingest, ingest.payload["module"], "plane", size=10)
    queue.start()
    return queue


def _load_rows(ingest: Job, rows: int, *, manual: bool = False) -> list[int]:
    provenance = {"source": "manual"} if manual else {"source": "csv", "job": ingest}
    entries = DataEntry.objects.bulk_create(
        DataEntry(
            module_id=ingest.payload["module"],
            data_entry_type="plane",
            year=2024,
            quantity=1,
            unit="km",
            classification={"haul": "short", "cabin": "economy"},
            row_number=None if manual else n + 2,
            created_at=T0,
            updated_at=T0,
            **provenance,
        )
        for n in range(rows)
    )
    return [entry.pk for entry in entries]


def test_a_fresh_attempt_starts_its_first_chunk_at_a_new_id(clock):
    ingest = _ingest(clock)
    before = _load_rows(ingest, 1, manual=True)  # a row of someone else, earlier
    assert _queue(ingest).after > before[0]


def test_rows_an_earlier_attempt_left_without_a_chunk_go_in_the_next_one(clock):
    ingest = _ingest(clock)
    earlier = _load_rows(ingest, 5)  # attempt 1 loaded them, then died before any chunk
    queue = _queue(ingest)
    assert queue.after == earlier[0] - 1
    queue.batch_loaded(10)  # attempt 2's first batch completes a chunk
    chunk = LoadChunk.objects.get(load_id=ingest.pk)
    assert chunk.after == earlier[0] - 1
    assert emissions.Scope.from_payload(Job.objects.get(pk=chunk.job_id).payload).after == chunk.after


def test_the_next_attempt_carries_on_where_the_last_chunk_ended(clock):
    ingest = _ingest(clock)
    _chunk(clock, ingest, 100, 200, state="succeeded")
    _load_rows(ingest, 5)
    assert _queue(ingest).after == 200
