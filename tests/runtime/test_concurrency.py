"""Concurrent work inside a partition on the real broker (docs/acker.md): an async processor with `concurrency`
gives the synchronous processor's outputs, commits input offsets only past records whose work is complete, retries
a record whose work times out and then dead-letters it (or stops), and stays at-least-once under SIGKILLs."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from stylus.runtime.deadletters import read_dead_letters
from stylus.runtime.runner import PipelineRunner
from stylus.runtime.worker import Worker
from tests.apps import concurrent as apps
from tests.conftest import PipelineFactory
from tests.runtime.crash_harness import run_crash_harness
from tests.support.chaos import group_offsets, wait_until
from tests.support.kafka import produce, read_raw
from tests.support.threads import join_runner

FAST_GROUP = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}


def _topic(pipeline: Any, prefix: str) -> str:
    return next(t for t in pipeline.topics if t.startswith(prefix + "-"))


def _values(bootstrap: str, topic: str) -> list[str]:
    """The topic's values as canonical JSON, sorted: a multiset, order aside."""
    return sorted(orjson.dumps(orjson.loads(m.value()), option=orjson.OPT_SORT_KEYS).decode()
                  for m in read_raw(bootstrap, topic))


def _run(runner: PipelineRunner, timeout: float = 180.0, *, failing: bool = False) -> None:
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    if not failing:
        join_runner(runner, thread, timeout)
        return
    thread.join(timeout)
    assert not thread.is_alive(), "the pipeline did not stop"


def test_async_and_deferred_outputs_equal_the_synchronous_processors(
        pipeline_factory: PipelineFactory, bootstrap: str) -> None:
    lookup = {"config": {"latency": "2ms"}, "inputs": ["events"],
              "semantics": {"state": "at_least_once", "output": "at_least_once"}, "checkpoint": {"interval": "200ms"}}
    doc = {"topics": {"events": {"partitions": 2}, "sync": {"partitions": 2}, "async": {"partitions": 2},
                      "deferred": {"partitions": 2}},
           "kafka": {"consumer": FAST_GROUP},
           "processors": {
               "sync": {"class": "processors.lookup:Lookup", "outputs": ["sync"], **lookup},
               "async": {"class": "processors.lookup:AsyncLookup", "outputs": ["async"], "concurrency": 16, **lookup},
               "deferred": {"class": "processors.lookup:DeferredLookup", "outputs": ["deferred"], "concurrency": 16,
                            **lookup}}}
    _, pipeline = pipeline_factory(doc, name="lk")
    events = _topic(pipeline, "events")
    rng = random.Random(11)
    produce(bootstrap, events, [(f"u{rng.randrange(40)}", {"i": i}) for i in range(800)])
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.5)
    _run(runner)
    assert not runner.errors, runner.errors
    expected = _values(bootstrap, _topic(pipeline, "sync"))
    assert len(expected) == 800
    assert _values(bootstrap, _topic(pipeline, "async")) == expected  # the `seen` counts per key included
    assert _values(bootstrap, _topic(pipeline, "deferred")) == expected
    for name in ("async", "deferred"):
        worker = runner.workers[name]
        assert isinstance(worker, Worker) and worker.concurrent is not None
        assert worker.processed == 800 and worker.concurrent.retries == 0
        assert group_offsets(bootstrap, pipeline.group_id(name), events, 2) == group_offsets(
            bootstrap, pipeline.group_id("sync"), events, 2)


def test_offsets_are_never_committed_past_work_in_flight(pipeline_factory: PipelineFactory, bootstrap: str) -> None:
    doc = {"topics": {"events": {"partitions": 1}, "out": {"partitions": 1}},
           "processors": {"held": {"class": "tests.apps.concurrent:HeldUntilGate", "inputs": ["events"],
                                   "outputs": ["out"], "concurrency": 8, "checkpoint": {"interval": "100ms"},
                                   "semantics": {"state": "at_least_once", "output": "at_least_once"}}}}
    _, pipeline = pipeline_factory(doc, name="held")
    events, out = _topic(pipeline, "events"), _topic(pipeline, "out")
    group = pipeline.group_id("held")
    apps.GATE.clear()
    produce(bootstrap, events, [(f"k{i}", {"i": i, "hold": i == 50}) for i in range(200)])
    stop = threading.Event()
    worker = Worker(pipeline, "held", bootstrap, stop=stop)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.processed >= 199, 60, "every record but the held one")
        before = worker.checkpoints
        produce(bootstrap, events, [(f"k{i}", {"i": i}) for i in range(200, 300)])  # work goes on past it
        wait_until(lambda: worker.processed >= 299 and worker.checkpoints >= before + 2, 60,
                   "two checkpoints after the new records completed")
        task = worker.tasks[(events, 0)]
        assert task.next_offset == 300 and task.checkpoint_offset == 50
        assert task.committed_offset == 50  # what the checkpoints saved: RocksDB and the group
        assert group_offsets(bootstrap, group, events, 1) == {0: 50}
        emitted = [orjson.loads(m.value())["i"] for m in read_raw(bootstrap, out)]
        assert sorted(emitted) == [i for i in range(300) if i != 50]  # emitted as their work completed
        apps.GATE.set()
        wait_until(lambda: group_offsets(bootstrap, group, events, 1) == {0: 300}, 60, "the commit past it")
    finally:
        stop.set()
        thread.join(60)
        apps.GATE.clear()
    assert not thread.is_alive() and worker.finished
    assert sorted(orjson.loads(m.value())["i"] for m in read_raw(bootstrap, out)) == list(range(300))


@pytest.mark.parametrize("on_error", ["dead_letter", "stop"])
def test_a_record_whose_work_times_out_is_retried_then_handed_to_on_error(
        pipeline_factory: PipelineFactory, bootstrap: str, on_error: str) -> None:
    doc = {"topics": {"events": {"partitions": 1}, "out": {"partitions": 1}},
           "processors": {"slow": {"class": "tests.apps.concurrent:Hangs", "inputs": ["events"], "outputs": ["out"],
                                   "semantics": {"output": "at_least_once"}, "concurrency": 4,
                                   "work_timeout": "300ms", "work_attempts": 3, "on_error": on_error}}}
    _, pipeline = pipeline_factory(doc, name=f"to-{on_error}")
    events, out = _topic(pipeline, "events"), _topic(pipeline, "out")
    base = random.randrange(1 << 30)  # ids of this run: TRIES is shared by the tests of this process
    produce(bootstrap, events, [(f"k{i}", {"id": base + i, "hang": i == 7}) for i in range(20)])
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.0)
    _run(runner, failing=on_error == "stop")
    assert apps.TRIES[base + 7] == 3  # the first attempt and two more
    emitted = sorted(orjson.loads(m.value())["id"] - base for m in read_raw(bootstrap, out))
    committed = group_offsets(bootstrap, pipeline.group_id("slow"), events, 1)[0]
    if on_error == "dead_letter":
        assert not runner.errors, runner.errors
        letters = read_dead_letters(bootstrap, pipeline, "slow")
        assert [(d.stage, d.as_dict()["source"]["offset"]) for d in letters] == [("timeout", 7)]
        assert "work not complete within 0.3s" in (letters[0].header("stylus.error") or "")
        assert emitted == [i for i in range(20) if i != 7]
        assert committed == 20
    else:
        assert "timeout failed at" in runner.errors["slow"] and "work_timeout" in runner.errors["slow"]
        assert committed == 7  # stopped on it: the next run tries it again
        assert 7 not in emitted


def test_at_least_once_holds_through_sigkills_with_concurrent_work(bootstrap: str, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    run = run_crash_harness(
        bootstrap, tmp_path / "crash", "at_least_once", "at_least_once", kills=5, rate=1000, seed=seed,
        interval="200ms", processor={"class": "tests.apps.concurrent:AsyncCounterNode", "concurrency": 32})
    assert run.kills >= 5, f"seed {seed}\n{run.log[-2000:]}"
    assert len(run.inputs) > 2000, f"seed {seed}"
    assert not run.state_violations(), f"seed {seed}: {run.state_violations()[:10]}"
    assert not run.output_violations(), f"seed {seed}: {run.output_violations()[:10]}"
    repeated = Counter(n for n in run.outputs_per_src.values() if n > 1)
    print(f"inputs {len(run.inputs)}, outputs {sum(run.outputs_per_src.values())}, repeated {dict(repeated)}")
