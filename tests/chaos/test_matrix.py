"""The chaos matrix's CI sample: fourteen (workload, fault, semantics pair) runs chosen by a fixed seed (two rounds of
every workload once and every fault at least once), each checked against its pair's promise on state and output
(tests/chaos/harness.py). Pairs an open, understood bug breaks for a combination (harness.KNOWN_BUGS) are left
out of the sample: their deterministic reproductions (test_findings.py, test_known_failures.py) fail instead, and
the long run (`python -m bench.chaos`) still runs them. `STYLUS_CHAOS_SEED=<seed>` runs that one seed instead,
whatever its combination (a seed printed by this test or by the long run).

    .venv/bin/pytest -n 2 tests/chaos/test_matrix.py      # ~2-3 minutes on 2 cores
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import ci_sample, combo_of, run_chaos

CI_SEED = 3
SEEDS = [int(os.environ["STYLUS_CHAOS_SEED"])] if os.environ.get("STYLUS_CHAOS_SEED") else ci_sample(CI_SEED)


def _id(seed: int) -> str:
    return f"{seed}-{combo_of(seed).name.replace('/', '-')}"


@pytest.mark.parametrize("seed", SEEDS, ids=_id)
def test_the_pair_keeps_its_promise_through_the_fault(seed: int, bootstrap: str, tmp_path: Path) -> None:
    result = run_chaos(seed, bootstrap, tmp_path)
    print(result.summary())
    assert result.ok, f"{result.summary()}\n{result.logs[-8000:]}"
