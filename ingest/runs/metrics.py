"""The hook runners' circuit breakers on ``/metrics``, read from their rows at each
scrape (so every web process reports the same state)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import jobs
from ingest.runs.models import BreakerState, RunnerBreaker


class BreakerCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "conveyor_hook_breaker_state",
            "1 for the state each hook runner's breaker is in (closed, open, half_open)",
            labels=["target", "state"])
        failures = GaugeMetricFamily(
            "conveyor_hook_breaker_failures", "Transient failures counted in the current window",
            labels=["target"])
        probe = GaugeMetricFamily(
            "conveyor_hook_breaker_next_probe_seconds",
            "Seconds until an open breaker lets its probe through (0 when closed or due)",
            labels=["target"])
        opened = CounterMetricFamily(
            "conveyor_hook_breaker_opened", "Times the breaker opened", labels=["target"])
        held = CounterMetricFamily(
            "conveyor_hook_breaker_held_back", "Hook launches held back while it was open",
            labels=["target"])
        now = jobs.now()
        for row in RunnerBreaker.objects.order_by("target"):
            for value in BreakerState.values:
                state.add_metric([row.target, value], 1.0 if row.state == value else 0.0)
            failures.add_metric([row.target], row.failures)
            wait = (row.next_probe_at - now).total_seconds() if row.next_probe_at else 0.0
            probe.add_metric([row.target], max(wait, 0.0) if row.state == BreakerState.OPEN else 0.0)
            opened.add_metric([row.target], row.times_opened)
            held.add_metric([row.target], row.denied)
        yield from (state, failures, probe, opened, held)
