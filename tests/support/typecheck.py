"""The type check's ratchet: mypy (with the Django and DRF plugins) over the product's
packages, counted per module against ``tests/mypy-baseline.json``.

The tree predates the type checker, so it starts with a known count of errors per
module; the count may only fall. ``python -m tests.support.typecheck --update`` rewrites the
baseline after errors were fixed (it refuses to raise any module's count).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "tests" / "mypy-baseline.json"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")


def run_mypy() -> tuple[Counter[str], list[str]]:
    """Errors per module, and the error lines, of one mypy run over the configured files."""
    env = {**os.environ, "DEBUG": "true"}  # the plugin loads the settings, which want one
    env.pop("DATABASE_URL", None)
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if ERROR.match(line)]
    if result.returncode and not lines:  # 2, or 1 without a single error: it did not check
        raise RuntimeError(f"mypy could not run:\n{result.stdout}{result.stderr}")
    return Counter(ERROR.match(line)["path"] for line in lines), lines


def baseline() -> Counter[str]:
    return Counter(json.loads(BASELINE.read_text()))


def grown(found: Counter[str], allowed: Counter[str]) -> dict[str, tuple[int, int]]:
    """Modules with more errors than allowed: path → (allowed, found)."""
    return {path: (allowed[path], count) for path, count in sorted(found.items()) if count > allowed[path]}


def shrunk(found: Counter[str], allowed: Counter[str]) -> dict[str, tuple[int, int]]:
    """Modules with fewer errors than allowed, whose baseline should come down."""
    return {path: (count, found[path]) for path, count in sorted(allowed.items()) if found[path] < count}


def main() -> int:
    if sys.argv[1:] != ["--update"]:
        print("usage: python -m tests.support.typecheck --update", file=sys.stderr)
        return 2
    found, lines = run_mypy()
    worse = grown(found, baseline())
    if worse:
        print("\n".join(line for line in lines if ERROR.match(line)["path"] in worse))
        print(f"refused: {len(worse)} module(s) have more errors than the baseline allows", file=sys.stderr)
        return 1
    BASELINE.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
    print(f"{BASELINE.relative_to(ROOT)}: {sum(found.values())} errors in {len(found)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
