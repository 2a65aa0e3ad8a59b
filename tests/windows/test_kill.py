"""SIGKILL a real `stylus run` in the middle of open windows; with exactly-once state and output, every
window's final result is in the output topic exactly once, and right."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus, start_stylus
from tests.support.kafka import read_json


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"})
    for r in records:
        producer.produce(topic, orjson.dumps(r), r["category"].encode(), timestamp=r["ts"])
    assert producer.flush(30) == 0


def test_sigkill_with_open_windows_gives_each_final_result_once(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory({
        "topics": {"events": {"partitions": 2}, "sums": {"partitions": 1}},
        "processors": {"win": {
            "class": "tests.apps.timed:CategorySum", "inputs": ["events"], "outputs": ["sums"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "event_time": {"field": "ts", "allowed_lateness": "2s", "idle_timeout": "1s"},
            "checkpoint": {"interval": "300ms"}, "batch_size": 200,
        }}})
    spec = pipeline.processors["win"]
    events, sums = spec.inputs[0], spec.outputs[0]
    rng = random.Random(21)
    base = 1_700_000_000_000
    records = [{"id": i, "ts": base + i * 50 + rng.randint(0, 49), "category": rng.choice("abcdef"),
                "amount": rng.randint(1, 9)} for i in range(12_000)]
    shuffled = sorted(records, key=lambda r: r["ts"] + rng.uniform(0, 1500))
    first, second = shuffled[:6000], shuffled[6000:]
    _produce(bootstrap, events, first)

    log = tmp_path / "run.log"
    proc = start_stylus("run", str(path), "--processor", "win", bootstrap=bootstrap, log=log)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(read_json(bootstrap, sums)) < 20:
            time.sleep(0.3)
        assert read_json(bootstrap, sums), log.read_text()[-3000:]
    finally:
        proc.send_signal(signal.SIGKILL)  # windows of the first half's tail are open right now
        proc.wait(10)
    killed_with = len(read_json(bootstrap, sums))

    for category in "abcdef":  # the rest of the input, then far-future records that close every window
        second.append({"id": -1, "ts": base + 10_000_000, "category": category, "amount": 0})
    _produce(bootstrap, events, second)
    done = run_stylus("run", str(path), "--processor", "win", "--exit-when-idle", "3", bootstrap=bootstrap,
                      timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]

    results = [r for r in read_json(bootstrap, sums) if r["start"] < base + 10_000_000 - 10_000]
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        expected[(r["category"], r["ts"] - r["ts"] % 10_000)] += r["amount"]
    seen = Counter((r["key"], r["start"]) for r in results)
    assert [k for k, n in seen.items() if n > 1] == []  # no window emitted twice across the crash
    assert {(r["key"], r["start"]): r["value"] for r in results} == dict(expected)
    assert 0 < killed_with < len(expected)  # the crash really happened with windows still open
