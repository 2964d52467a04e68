"""The hook runners' circuit breakers on ``/metrics``, one series per runner target and
tenant (its slug), read from their rows at each scrape (so every web process reports the
same state)."""

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
            labels=["target", "tenant", "state"],
        )
        failures = GaugeMetricFamily(
            "conveyor_hook_breaker_failures",
            "Transient failures counted in the current window",
            labels=["target", "tenant"],
        )
        probe = GaugeMetricFamily(
            "conveyor_hook_breaker_next_probe_seconds",
            "Seconds until an open breaker lets its probe through (0 when closed or due)",
            labels=["target", "tenant"],
        )
        opened = CounterMetricFamily(
            "conveyor_hook_breaker_opened", "Times the breaker opened", labels=["target", "tenant"]
        )
        held = CounterMetricFamily(
            "conveyor_hook_breaker_held_back",
            "Hook launches held back while it was open",
            labels=["target", "tenant"],
        )
        now = jobs.now()
        rows = RunnerBreaker.objects.select_related("tenant").order_by("target", "tenant__slug")
        for row in rows:
            key = [row.target, row.tenant.slug]
            for value in BreakerState.values:
                state.add_metric([*key, value], 1.0 if row.state == value else 0.0)
            failures.add_metric(key, row.failures)
            wait = (row.next_probe_at - now).total_seconds() if row.next_probe_at else 0.0
            probe.add_metric(key, max(wait, 0.0) if row.state == BreakerState.OPEN else 0.0)
            opened.add_metric(key, row.times_opened)
            held.add_metric(key, row.denied)
        yield from (state, failures, probe, opened, held)
