"""Exactly-once settling blocked by someone else's open transaction is retried, never fatal.

Settling a partition reads its output partitions (read_committed) since the last checkpoint. A transaction
another producer left open on one of them holds every such reader back: on the embedded broker until its
transactional id is initialised again, on Kafka until the coordinator times it out. The worker once waited
inside the rebalance callback and then failed (the zombie test's failure in a full run); now it hands the
assignment back, rejoins, and goes on once the transaction is gone, with its output still exactly once."""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter
from pathlib import Path

import orjson
from confluent_kafka import Producer

from stylus.kafka.reader import read_topic
from tests.conftest import PipelineFactory
from tests.support.cli import ROOT, run_stylus, stylus_cmd, stylus_env, wait_for_text
from tests.support.kafka import produce


def test_blocked_settle_hands_the_assignment_back_and_recovers(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory({
        "pipeline": "blocked",
        "topics": {"events": {"partitions": 1}, "counts": {"partitions": 1}},
        "processors": {"counter": {
            "class": "processors.counter:CounterNode", "inputs": ["events"], "outputs": ["counts"],
            "config": {"window": "1h"},
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "checkpoint": {"interval": "300ms"},
        }},
    })
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)

    def feed(first: int, n: int) -> None:
        produce(bootstrap, events, [(f"k{i % 7}", {"i": i}) for i in range(first, first + n)],
                timestamps=[1_700_000_000_000 + i for i in range(first, first + n)])

    feed(0, 200)  # a first run leaves a committed checkpoint and its output marks behind
    first = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]

    blocker = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"blocker-{uuid.uuid4().hex[:6]}"})
    blocker.init_transactions(30)
    blocker.begin_transaction()
    blocker.produce(counts, b"{}", b"blocker")
    assert blocker.flush(10) == 0  # in the partition, its transaction open: read_committed readers wait
    feed(200, 300)

    log = tmp_path / "second.log"
    with open(log, "wb") as out:
        second = subprocess.Popen(stylus_cmd("run", str(path), "--exit-when-idle", "2"), env=stylus_env(bootstrap),
                                  stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for_text(log, "handing the assignment back", timeout=90)  # after the 30 s settle read timeout
        assert second.poll() is None, log.read_text()[-3000:]  # blocked is not fatal
        blocker.commit_transaction(30)
        assert second.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()

    assert "assigned" in log.read_text().split("handing the assignment back", 1)[1], "it joined again"
    outputs = [m for m in read_topic(bootstrap, counts) if m.key() != b"blocker"]
    sources = Counter(orjson.loads(m.value())["src"] for m in outputs)
    inputs = {f"{events}:{m.partition()}:{m.offset()}" for m in read_topic(bootstrap, events)}
    assert len(inputs) == 500
    assert set(sources) == inputs and set(sources.values()) == {1}, "every input's output exactly once"
