"""bench/batch.py refuses options it cannot honour rather than ignore them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_key_spread_without_the_totals_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.batch", "--only", "filter", "--keys", "100", "--records", "10"],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 1
    assert "--keys spreads the running totals' input: add totals to --only" in done.stderr
