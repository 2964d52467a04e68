"""What ``ingest.ReconcileRuns`` settles each minute besides stalled runs.

The parts of the app built on runs (the scraper's handoffs) add their own sweep here, so
that the runs never import them: the dependency goes one way, from the parts to the runs.
"""

from __future__ import annotations

from collections.abc import Callable

Sweep = Callable[[], int]

_sweeps: dict[str, Sweep] = {}


def add_sweep(name: str, sweep: Sweep) -> None:
    """Have ``ingest.ReconcileRuns`` also call ``sweep`` each minute, with the count it
    returns under ``name`` in the job's result. A second sweep under a name is an error."""
    if _sweeps.setdefault(name, sweep) is not sweep:
        raise ValueError(f"a reconcile sweep named {name!r} is added already")


def sweep_all() -> dict[str, int]:
    """Run every added sweep, in the order they were added: what each settled."""
    return {name: sweep() for name, sweep in _sweeps.items()}
