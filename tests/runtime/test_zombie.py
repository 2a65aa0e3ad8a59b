"""A zombie cannot commit: an exactly-once instance frozen with SIGSTOP loses its partitions to another
instance (on another "machine": its own state dir, restoring from the shared backup); when the zombie
resumes, its transactions are fenced, and a read_committed reader sees every input's output once."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
import yaml

from stylus.api import import_processor_class
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_topic
from stylus.monoid.backend import PostgresBackend, RemotePartitionStore
from stylus.runtime.transactions import fence_producer
from stylus.runtime.worker import Worker
from tests.conftest import PipelineFactory
from tests.monoid.helpers import stored_offsets, table_contents
from tests.runtime.crash_harness import blocked_tail
from tests.state.helpers import wait_for
from tests.support.cli import ROOT, run_stylus, stylus_cmd, stylus_env, wait_for_text
from tests.support.kafka import produce
from tests.support.pg import fresh_database
from tests.support.threads import start_thread

PARTITIONS = 2


def test_a_resumed_zombie_is_fenced_and_output_stays_exactly_once(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    path_a, pipeline = pipeline_factory({
        "pipeline": "zombie",
        # a member that vanished mid-rebalance is waited for up to max.poll.interval.ms (the rebalance timeout)
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500,
                               "max.poll.interval.ms": 10000}},
        "topics": {"events": {"partitions": PARTITIONS}, "counts": {"partitions": PARTITIONS}},
        "processors": {"counter": {
            "class": "processors.counter:CounterNode", "inputs": ["events"], "outputs": ["counts"],
            "config": {"window": "1h"},
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "checkpoint": {"interval": "300ms"},
            "state": {"dir": str(tmp_path / "state-a"),
                      "backup": {"uri": f"file://{backup}", "interval": "1s"}},
        }},
    })
    doc = yaml.safe_load(path_a.read_text())
    doc["processors"]["counter"]["state"]["dir"] = str(tmp_path / "state-b")  # another machine
    path_b = tmp_path / "b.yaml"
    path_b.write_text(yaml.safe_dump(doc))
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    run_stylus("topics", "create", str(path_a), bootstrap=bootstrap)

    def feed(first: int, n: int) -> None:
        produce(bootstrap, events, [(f"k{i % 13}", {"i": i}) for i in range(first, first + n)],
                timestamps=[1_700_000_000_000 + i for i in range(first, first + n)])

    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    feed(0, 3000)
    with open(log_a, "wb") as out:
        a = subprocess.Popen(stylus_cmd("run", str(path_a), "--instance", "a"), env=stylus_env(bootstrap),
                             stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    b = None
    try:
        wait_for_text(log_a, "backed up", count=PARTITIONS)
        feed(3000, 2000)
        time.sleep(0.3)  # A is mid-stream, a transaction open, when it freezes
        a.send_signal(signal.SIGSTOP)
        with open(log_b, "wb") as out:  # B finishes the input itself: it stops once idle for 15 s
            b = subprocess.Popen(stylus_cmd("run", str(path_b), "--instance", "b", "--exit-when-idle", "15"),
                                 env=stylus_env(bootstrap), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_for_text(log_b, "assigned")
        wait_for_text(log_b, f"{events}[0]", count=1)
        feed(5000, 2000)
        time.sleep(4)
        a.send_signal(signal.SIGCONT)  # the zombie wakes up believing it owns partitions
        feed(7000, 1000)
        # it finds out either way: its next commit is refused (fenced), or its lost session makes it drop
        # the partitions uncommitted; in neither case can it commit anything
        deadline = time.monotonic() + 60
        while not any(w in log_a.read_text(errors="replace") for w in ("fenced", "without a clean hand-over")):
            assert time.monotonic() < deadline, log_a.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        a.send_signal(signal.SIGTERM)  # it leaves; B takes everything back and drains
        a.wait(timeout=60)
        try:
            rc = b.wait(timeout=150)
        except subprocess.TimeoutExpired:  # say whose open transaction holds the output back (docs/faults.md)
            raise AssertionError(f"{log_b.read_text()[-1500:]}\n{blocked_tail(bootstrap, counts)}") from None
        assert rc == 0, log_b.read_text()[-3000:]
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    inputs = {f"{events}:{m.partition()}:{m.offset()}" for m in read_topic(bootstrap, events)}
    outputs = Counter(orjson.loads(m.value())["src"] for m in read_topic(bootstrap, counts))
    assert len(inputs) == 8000
    assert set(outputs) == inputs, "every input has its output"
    assert {n for n in outputs.values()} == {1}, [s for s, n in outputs.items() if n > 1][:10]


@pytest.mark.parametrize(("app", "after_fence"), [
    ("tests.apps.batch:RunningTotalsPerRecord", "one record"),  # the fence served by the worker's poll
    ("tests.apps.batch:RunningTotalsPerRecord", "a burst"),  # raised by produce, through the dead-letter path
    ("tests.apps.batch:RunningTotals", "a burst"),  # raised by produce, out of the batch's release
])
def test_a_fence_found_before_any_commit_of_ours_is_survived(
        bootstrap: str, pipeline_factory: PipelineFactory, app: str, after_fence: str) -> None:
    """The partitions' next owner fences this instance's producer while no commit of ours is under way. The
    instance finds out from its own producer: a record produced into the fenced transaction makes the broker
    refuse it, and then either the next poll serves the fence (one record, then nothing to produce) or the
    next records' `produce` raises the client's fatal error (a burst). Neither is a record's failure, and
    neither stops the worker: it drops its partitions, rejoins on a new producer and replays them from their
    last commit, so a read_committed reader sees every input's running total once (it used to dead-letter the
    record and stop, exit 1, as the dead letter met the same fenced producer)."""
    _, pipeline = pipeline_factory({
        "kafka": {"consumer": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}},
        "topics": {"numbers": {"partitions": PARTITIONS}, "totals": {"partitions": PARTITIONS}},
        "processors": {"p": {"class": app, "inputs": ["numbers"], "outputs": ["totals"],
                             "semantics": {"state": "exactly_once", "output": "exactly_once"},
                             "checkpoint": {"interval": "1h"}}},  # no commit of ours but the final one
    })
    numbers, totals = pipeline.processors["p"].inputs[0], pipeline.processors["p"].outputs[0]
    sent = 0

    def feed(n: int) -> None:
        nonlocal sent
        produce(bootstrap, numbers, [(f"k{i % 11}", {"n": i}) for i in range(sent, sent + n)])
        sent += n

    worker = Worker(pipeline, "p", bootstrap)
    thread, errors = start_thread(worker.run)
    try:
        feed(1000)
        wait_for(lambda: worker.processed >= 1000, 60, "the first records processed")
        assert worker.transaction is not None
        fenced_id = worker.transaction.transactional_id
        fence_producer(bootstrap, pipeline, "p", fenced_id)
        feed(1 if after_fence == "one record" else 3000)
        wait_for(lambda: worker.transaction is not None and worker.transaction.transactional_id != fenced_id
                 and worker.tasks, 60, "a rejoin on a new producer", explain=lambda: errors)
        feed(1000)
        ends = end_offsets(bootstrap, [(numbers, p) for p in range(PARTITIONS)])
        wait_for(lambda: all((task := worker.tasks.get(tp)) is not None and task.next_offset == end
                             for tp, (_, end) in ends.items()),
                 60, "every input consumed", explain=lambda: errors)
    finally:
        worker.stop_event.set()
        thread.join(60)
    assert not thread.is_alive() and not errors, errors
    assert worker.failures.dead_lettered == 0  # the fence is not a record's failure
    runs: dict[str, list[int]] = {}
    for msg in read_topic(bootstrap, totals):
        out = orjson.loads(msg.value() or b"{}")
        runs.setdefault(out["key"], []).append(out["count"])
    assert sum(map(len, runs.values())) == sent
    assert all(counts == list(range(1, len(counts) + 1)) for counts in runs.values()), "each total once, in order"


def test_a_monoid_zombie_refused_by_the_database_rejoins_and_resumes_where_the_owner_left(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    """Monoid state in PostgreSQL fences by the stored offset: a save that expects an offset another owner has
    moved on is refused (`StaleOwner`). The refused instance is a zombie like a fenced producer: it forgets
    the partition's unsaved deltas and rejoins, then resumes from the offset the owner saved, with the owner's
    state (it used to stop, exit 1). Here the other owner took records 100-149 (a delta of 1,000 to `k0`)."""
    with fresh_database() as dsn:
        _, pipeline = pipeline_factory({
            "kafka": {"consumer": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}},
            "topics": {"events": {"partitions": 1}},
            "processors": {"agg": {"class": "tests.apps.monoids:ValueSum", "inputs": ["events"],
                                   "semantics": {"state": "exactly_once", "output": "at_least_once"},
                                   "checkpoint": {"interval": "200ms"},
                                   "state": {"backend": "postgres", "dsn": dsn}}},
        })
        events = pipeline.processors["agg"].inputs[0]

        def feed(first: int, last: int) -> None:
            produce(bootstrap, events, [(None, {"k": f"k{i % 5}", "n": 1}) for i in range(first, last)])

        def saved() -> int | None:
            return stored_offsets(dsn).get((events, 0))

        worker = Worker(pipeline, "agg", bootstrap)
        thread, errors = start_thread(worker.run)
        try:
            feed(0, 100)
            wait_for(lambda: saved() == 100, 60, "the first records saved", explain=lambda: errors)
            spec = pipeline.processors["agg"]
            owner = PostgresBackend(pipeline, "agg", import_processor_class(spec.class_)(config=spec.config,
                                                                                          name="agg"))
            store = owner.open(events, 0)
            assert isinstance(store, RemotePartitionStore)
            store.deltas.add("k0", 1000)
            store.save(150)  # the worker is idle: no save of its own can come between the read and this one
            store.close()
            rebalances = worker.rebalances
            feed(100, 200)
            wait_for(lambda: saved() == 200, 60, "the rest saved", explain=lambda: errors)
            assert worker.rebalances > rebalances  # it rejoined
        finally:
            worker.stop_event.set()
            thread.join(60)
        assert not thread.is_alive() and not errors, errors
        totals = table_contents(dsn, pipeline)
    assert totals == {"k0": 20 + 1000 + 10, "k1": 30, "k2": 30, "k3": 30, "k4": 30}
