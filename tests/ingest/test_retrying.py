"""The sync's retry policy, for any outcomes: transient errors only are tried again, at
most ``max_attempts`` times in all, waiting base × 2^(attempt − 1) between tries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.scraping.retrying import RetryPolicy, attempt, is_transient

OUTCOMES = st.lists(st.sampled_from(["ok", "timeout", "refused"]), min_size=1, max_size=8)


@given(OUTCOMES, st.integers(1, 6), st.sampled_from([0.0, 0.5, 2.0]))
def test_only_transient_errors_are_retried_with_doubling_waits(outcomes, tries, base):
    policy = RetryPolicy(max_attempts=tries, base_seconds=base)
    calls: list[int] = []
    waits: list[float] = []

    def call(number: int) -> str:
        calls.append(number)
        kind = outcomes[min(number, len(outcomes)) - 1]
        if kind == "timeout":
            raise TimeoutError("the queue did not answer")
        if kind == "refused":
            raise ValueError("not a transient error")
        return "queued"

    result = attempt(call, policy, sleep=waits.append)

    assert calls == list(range(1, len(calls) + 1)) and len(calls) <= tries
    last = outcomes[min(len(calls), len(outcomes)) - 1]
    assert (result.error is None) == (last == "ok")
    assert result.attempts == len(calls)
    if last == "timeout":
        assert len(calls) == tries and result.exhausted  # every attempt used
    if last == "refused":
        assert not is_transient(result.error) and not result.exhausted
    expected = [base * 2 ** (n - 1) for n in range(1, len(calls))]
    assert waits == [wait for wait in expected if wait > 0]
