"""`--pin` (bench/pinning.py): every thread of a pinned process runs on the CPUs it was given, threads it starts
later included; a measured side pins itself before its Kafka client starts threads; settings it cannot honour
are refused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.batch import run_side
from bench.pinning import pin_process, split_cores, thread_cpus
from bench.throughput import load_input

ROOT = Path(__file__).resolve().parents[2]
CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="pinning is only visible with two CPUs or more")

THREADED = """
import sys, threading
stop = threading.Event()
def start(n):
    for _ in range(n):
        threading.Thread(target=stop.wait, daemon=True).start()
    print("ready", threading.active_count(), flush=True)
start(3)
for line in sys.stdin:
    start(int(line))
"""


@pytest.fixture
def threaded() -> Iterator[subprocess.Popen[str]]:
    """A process of four threads that starts more when told to (a number on its stdin)."""
    process = subprocess.Popen([sys.executable, "-c", THREADED], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None and process.stdout.readline().split() == ["ready", "4"]
    yield process
    process.kill()
    process.wait()


@needs_two
def test_every_thread_of_a_pinned_process_runs_where_it_was_put(threaded: subprocess.Popen[str]) -> None:
    assert set(map(frozenset, thread_cpus(threaded.pid).values())) == {frozenset(CPUS)}
    pin_process(threaded.pid, {CPUS[0]})
    before = thread_cpus(threaded.pid)
    assert len(before) == 4 and all(cpus == {CPUS[0]} for cpus in before.values())
    assert threaded.stdin is not None and threaded.stdout is not None
    threaded.stdin.write("2\n")
    threaded.stdin.flush()
    assert threaded.stdout.readline().split() == ["ready", "6"]
    after = thread_cpus(threaded.pid)
    assert len(after) == 6 and all(cpus == {CPUS[0]} for cpus in after.values())  # new threads inherit


@needs_two
def test_the_cores_split_one_for_the_side_and_the_rest_for_the_broker() -> None:
    side, broker = split_cores()
    assert len(side) == 1 and side | broker == set(CPUS) and not side & broker


def test_pinning_is_refused_with_one_cpu() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
                           " from bench.pinning import split_cores; split_cores()"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "--pin needs two CPUs" in done.stderr and "run without --pin" in done.stderr


def test_pinning_is_refused_for_the_spark_sides() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.batch", "--pin", "--only", "filter,spark", "--records", "10"],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 1
    assert "run the spark sides without --pin" in done.stderr


@needs_two
def test_a_pinned_side_runs_every_thread_on_its_core(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=8)
    load_input(bootstrap, topic, 800)
    result = run_side("filter/floor", bootstrap, topic, 800, 2000, cpus={CPUS[-1]})
    assert result["cpus"] == [CPUS[-1]]  # the main thread, the imports' pools and the Kafka client's: all on it
    assert result["rate"] > 0
