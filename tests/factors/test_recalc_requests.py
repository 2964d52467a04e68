"""Requests for the same recalculation, sent at once on real concurrent connections,
queue exactly one job: the engine's pending key decides, not a lookup before the insert."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from rest_framework.test import APIClient

from jobs import engine
from jobs.models import Job
from tests.support.base import as_user, granted, staff

pytestmark = pytest.mark.django_db(transaction=True)

REQUESTS = 6


def recalculate_at_once(clients: list[APIClient], year: int | None = None) -> list:
    gate, answers = threading.Barrier(len(clients)), [None] * len(clients)
    body = {} if year is None else {"year": year}

    def send(n: int) -> None:
        try:
            gate.wait(10)
            answers[n] = clients[n].post("/sync/recalculate-emissions/plane", body, format="json")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(n,)) for n in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def waiting() -> list[Job]:
    return list(Job.objects.filter(type="factors.emission_recalc", state=Job.State.PENDING))


@pytest.fixture
def operators() -> list[APIClient]:
    olga = granted(staff("olga", operator=True), "factors.operate_emissionfactor")
    return [as_user(olga) for _ in range(REQUESTS)]


def test_parallel_requests_queue_one_recalculation_and_answer_202_once(operators, clock):
    answers = recalculate_at_once(operators)

    assert sorted(a.status_code for a in answers) == [200] * (REQUESTS - 1) + [202]
    assert len({a.json()["job"] for a in answers}) == 1
    assert [job.pk for job in waiting()] == [answers[0].json()["job"]]
    assert [a.json()["created"] for a in answers].count(True) == 1


def test_requests_during_a_running_recalculation_queue_exactly_one_more(operators, clock):
    first = recalculate_at_once(operators)[0].json()["job"]
    assert [job.pk for job in engine.claim("w", limit=5).jobs] == [first]

    answers = recalculate_at_once(operators)

    assert sorted(a.status_code for a in answers) == [200] * (REQUESTS - 1) + [202]
    queued = waiting()
    assert len(queued) == 1 and queued[0].pk != first
    assert {a.json()["job"] for a in answers} == {queued[0].pk}


def test_a_recalculation_of_one_year_is_not_answered_by_one_of_all_years(operators, clock):
    everything = operators[0].post("/sync/recalculate-emissions/plane", {}, format="json")
    one_year = operators[1].post("/sync/recalculate-emissions/plane", {"year": 2024}, format="json")
    again = operators[2].post("/sync/recalculate-emissions/plane", {"year": 2024}, format="json")

    assert (everything.status_code, one_year.status_code, again.status_code) == (202, 202, 200)
    assert one_year.json()["job"] != everything.json()["job"]
    assert again.json()["job"] == one_year.json()["job"]
