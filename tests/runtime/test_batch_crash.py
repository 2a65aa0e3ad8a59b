"""A batch processor keeps every semantics pair's promise through random SIGKILLs, as the per-record Counter
Node does (tests/runtime/test_semantics.py): the batch Counter Node (tests/apps/batch.py) in the crash harness.
The seed is printed; `STYLUS_CRASH_SEED=N` runs one again."""

from __future__ import annotations

import os
import random
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from stylus.config.model import FIGURE8_PAIRS
from tests.runtime.crash_harness import CrashRun, run_crash_harness

PAIRS = list(FIGURE8_PAIRS)
SEED = int(os.environ.get("STYLUS_CRASH_SEED") or random.randrange(1_000_000))


def _id(pair: tuple[str, str]) -> str:
    short = {"at_least_once": "alo", "at_most_once": "amo", "exactly_once": "eo"}
    return f"{short[pair[0]]}-{short[pair[1]]}"


@pytest.fixture(scope="module")
def runs(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future[CrashRun]]:
    print(f"batch crash runs: seed {SEED} (STYLUS_CRASH_SEED={SEED} runs them again)")
    root: Path = tmp_path_factory.mktemp("batch-crash")
    pool = ThreadPoolExecutor(max_workers=len(PAIRS))
    futures = {_id(pair): pool.submit(run_crash_harness, bootstrap, root / _id(pair), *pair, kills=5, rate=1000,
                                      seed=SEED + i, interval="500ms",
                                      processor={"class": "tests.apps.batch:CounterNode", "batch_size": 500})
               for i, pair in enumerate(PAIRS)}
    pool.shutdown(wait=False)
    return futures


@pytest.mark.parametrize("pair", PAIRS, ids=_id)
def test_batch_processor_keeps_its_promise_through_random_sigkills(runs: dict[str, Future[CrashRun]],
                                                                   pair: tuple[str, str]) -> None:
    run = runs[_id(pair)].result(timeout=900)
    assert run.kills >= 5, f"seed {SEED}: {run.log[-2000:]}"
    assert len(run.inputs) > 3000
    assert not run.state_violations(), (SEED, run.state_violations()[:10])
    assert not run.output_violations(), (SEED, run.output_violations()[:10])
    if pair == ("exactly_once", "exactly_once"):  # across the crashes: what a crash-free run would give
        assert sum(run.outputs_per_src.values()) == len(run.inputs)
