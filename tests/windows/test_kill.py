"""SIGKILL a real `stylus run` in the middle of open windows; with exactly-once state and output, every
window's final result is in the output topic exactly once, and right."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from stylus.runtime.transactions import ID_HEADER
from tests.conftest import PipelineFactory
from tests.runtime.crash_harness import blocked_tail
from tests.support.cli import ROOT, run_stylus, start_stylus, stylus_cmd, stylus_env
from tests.support.kafka import read_json, read_raw


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"})
    for r in records:
        producer.produce(topic, orjson.dumps(r), r["category"].encode(), timestamp=r["ts"])
    assert producer.flush(30) == 0


def _final_results(bootstrap: str, topic: str, log: Path) -> list[dict[str, Any]]:
    """The committed results; when a transaction left open blocks the read, say whose it is."""
    try:
        return read_json(bootstrap, topic)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{blocked_tail(bootstrap, topic)}\n{log.read_text(errors='replace')[-3000:]}"
                           ) from exc


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
    log.write_text(log.read_text(errors="replace") + "--- restart\n" + done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]

    results = [r for r in _final_results(bootstrap, sums, log) if r["start"] < base + 10_000_000 - 10_000]
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        expected[(r["category"], r["ts"] - r["ts"] % 10_000)] += r["amount"]
    seen = Counter((r["key"], r["start"]) for r in results)
    assert [k for k, n in seen.items() if n > 1] == []  # no window emitted twice across the crash
    got = {(r["key"], r["start"]): r["value"] for r in results}
    wrong = sorted(k for k in expected.keys() | got.keys() if got.get(k) != expected.get(k))
    if wrong:  # post-mortem: are the missing results in the topic at all (aborted or filtered)?
        raw = read_json(bootstrap, sums, isolation="read_uncommitted")
        print("uncommitted has", len(raw), "records; of the wrong windows it has",
              sorted({(r["key"], r["start"], r["value"]) for r in raw if (r["key"], r["start"]) in set(wrong)})[:10])
        print("wrong windows by category:", {c: sorted(s - base for k, s in wrong if k == c) for c in "abcdef"})
        by_origin: dict[str, list[tuple[str, int]]] = defaultdict(list)  # input partition -> (category, start)
        for m in read_raw(bootstrap, sums, isolation="read_uncommitted"):
            out_id = dict(m.headers() or []).get(ID_HEADER, b"?").decode()
            r = orjson.loads(m.value())
            by_origin[out_id.split(":T", 1)[0]].append((r["key"], r["start"] - base))
        for origin, made in sorted(by_origin.items()):
            print(f"outputs of {origin}: {len(made)}, categories {sorted({c for c, _ in made})}, starts "
                  f"{min(s for _, s in made)}..{max(s for _, s in made)}")
    assert not wrong, (f"{len(wrong)} windows wrong or missing (got, expected): "
                       f"{[(k, got.get(k), expected.get(k)) for k in wrong[:5]]}; {len(results)} results, "
                       f"{killed_with} visible at the kill; log:\n{log.read_text()[-4000:]}")
    assert 0 < killed_with < len(expected)  # the crash really happened with windows still open


def test_a_crash_in_a_checkpoint_of_timers_only_loses_no_window(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """Windows that close with no new input (every partition idle, the watermark jumps) are saved by a
    transaction that consumed nothing: its input offset equals the last one, so only the checkpoint id
    committed beside it tells whether it won. A SIGKILL after staging it, with its results still in the
    producer, must neither apply its state without its outputs nor fire the windows twice."""
    path, pipeline = pipeline_factory({
        "kafka": {"producer": {"linger.ms": 5000}},  # results wait in the producer until the commit flushes
        "topics": {"events": {"partitions": 2}, "sums": {"partitions": 1}},
        "processors": {"win": {
            "class": "tests.apps.timed:CategorySum", "inputs": ["events"], "outputs": ["sums"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "event_time": {"field": "ts", "allowed_lateness": "2s", "idle_timeout": "1s"},
            "checkpoint": {"interval": "300ms"},
        }}})
    events, sums = pipeline.processors["win"].inputs[0], pipeline.processors["win"].outputs[0]
    assert run_stylus("topics", "create", str(path), bootstrap=bootstrap).returncode == 0
    base = 1_700_000_000_000
    # partition 0 runs to 100 s of event time, partition 1 to 50 s: once both sit idle, the watermark
    # follows partition 0 and closes partition 1's last window and most of partition 0's, input-free
    records = [(0, {"category": "a", "ts": base + i * 100, "amount": i % 7 + 1}) for i in range(1000)]
    records += [(1, {"category": "b", "ts": base + i * 100, "amount": i % 5 + 1}) for i in range(500)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, r in records:
        producer.produce(events, orjson.dumps(r), r["category"].encode(), partition=partition, timestamp=r["ts"])
    assert producer.flush(30) == 0

    log = tmp_path / "run.log"
    env = stylus_env(bootstrap) | {"STYLUS_FAULT_KILL_AFTER": "txn.stage.no-input:1"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(stylus_cmd("run", str(path), "--processor", "win"), env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT)
    assert proc.wait(90) == -signal.SIGKILL, log.read_text()[-3000:]

    for partition, category in ((0, "a"), (1, "b")):  # far-future records close every window
        far = {"category": category, "ts": base + 10_000_000, "amount": 0}
        producer.produce(events, orjson.dumps(far), category.encode(), partition=partition, timestamp=far["ts"])
    assert producer.flush(30) == 0
    done = run_stylus("run", str(path), "--processor", "win", "--exit-when-idle", "3", bootstrap=bootstrap,
                      timeout=120)
    log.write_text(log.read_text(errors="replace") + "--- restart\n" + done.stdout + done.stderr)
    assert done.returncode == 0, log.read_text()[-3000:]
    assert "discarding the staged checkpoint" in log.read_text()  # its transaction never committed

    results = [r for r in _final_results(bootstrap, sums, log) if r["start"] < base + 10_000_000 - 10_000]
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for _, r in records:
        expected[(r["category"], r["ts"] - r["ts"] % 10_000)] += r["amount"]
    seen = Counter((r["key"], r["start"]) for r in results)
    assert [k for k, n in seen.items() if n > 1] == [], "a window fired twice"
    got = {(r["key"], r["start"]): r["value"] for r in results}
    if got != dict(expected):  # post-mortem: are the missing results in the topic at all?
        raw = read_json(bootstrap, sums, isolation="read_uncommitted")
        print("uncommitted:", sorted((r["key"], r["start"], r["value"]) for r in raw)[:40])
        print(log.read_text(errors="replace")[-4000:])
    assert got == dict(expected), sorted(set(expected) - set(got))
