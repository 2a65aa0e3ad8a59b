"""Duplicate suppression on the real broker: an at-least-once upstream SIGKILLed before its checkpoints
re-emits them all; the downstream counter with `dedup` still counts every input record exactly once,
also after a restart (its Bloom filter rebuilt from the seen-set in RocksDB) and with an id header."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer

from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus, start_stylus
from tests.support.kafka import produce, read_raw
from tests.support.state import summed_state

PARTITIONS = 2


def doc() -> dict[str, object]:
    consumer = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}
    return {
        "pipeline": "dd",
        "kafka": {"consumer": consumer},
        "topics": {"events": {"partitions": PARTITIONS}, "mid": {"partitions": PARTITIONS},
                   "counts": {"partitions": PARTITIONS}},
        "processors": {
            # checkpoints far apart: a SIGKILL always lands before one, so everything emitted is emitted again
            "up": {"class": "tests.apps.counting:Passthrough", "inputs": ["events"], "outputs": ["mid"],
                   "semantics": {"output": "at_least_once"}, "checkpoint": {"interval": "30s"}},
            "counter": {"class": "tests.apps.counting:WordCount", "inputs": ["mid"], "outputs": ["counts"],
                        "semantics": {"state": "exactly_once", "output": "at_least_once"},
                        "checkpoint": {"interval": "200ms"}, "dedup": {"window": "10m"}},
        },
    }


def counts(state_dir: Path, pipeline: str, topic: str) -> Counter[str]:
    return summed_state(state_dir, pipeline, "counter", topic, PARTITIONS)


def wait_for(log: Path, text: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count(text) < count:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)


def test_downstream_counts_exactly_once_despite_upstream_replays(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(doc())
    events, mid = pipeline.processors["up"].inputs[0], pipeline.processors["counter"].inputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    n = 3000
    truth = Counter(f"w{i % 37}" for i in range(n))
    base = int(time.time() * 1000)
    produce(bootstrap, events, [(f"w{i % 37}", {"w": f"w{i % 37}", "i": i}) for i in range(n)],
            timestamps=[base + i for i in range(n)])

    log = tmp_path / "up.log"
    proc = start_stylus("run", str(path), "--processor", "up", bootstrap=bootstrap, log=log)
    try:  # the upstream is killed after it emitted everything, before its first checkpoint
        wait_for(log, "assigned", 1)
        deadline = time.monotonic() + 30
        while len(read_raw(bootstrap, mid, "read_uncommitted")) < n:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    up = run_stylus("run", str(path), "--processor", "up", "--exit-when-idle", "1", bootstrap=bootstrap)
    assert up.returncode == 0, up.stderr
    written = read_raw(bootstrap, mid, "read_uncommitted")
    assert len(written) >= 2 * n  # every input record reached `mid` (at least) twice

    down = run_stylus("run", str(path), "--processor", "counter", "--exit-when-idle", "1", bootstrap=bootstrap)
    assert down.returncode == 0, down.stderr
    state_dir = tmp_path / "state"
    assert counts(state_dir, pipeline.pipeline, mid) == truth

    # more repeats later (the same bytes and timestamps again), and records with an id header: the restarted
    # counter rebuilds its Bloom filter from RocksDB and still drops the repeats
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for msg in written[: n // 2]:
        producer.produce(mid, msg.value(), msg.key(), partition=msg.partition(), timestamp=msg.timestamp()[1])
    for i in range(100):  # same key and value each time: only the header tells them apart
        for _ in range(2):
            producer.produce(mid, b'{"w":"hdr"}', b"hdr", partition=0, timestamp=base + n,
                             headers=[("stylus.id", f"e{i}".encode())])
    assert producer.flush(30) == 0
    truth["hdr"] = 100
    down = run_stylus("run", str(path), "--processor", "counter", "--exit-when-idle", "1", bootstrap=bootstrap)
    assert down.returncode == 0, down.stderr
    assert counts(state_dir, pipeline.pipeline, mid) == truth
