"""Crash harness: run the Counter Node under a semantics pair, SIGKILL it at random points while input
keeps arriving, restart it, drain, and compare state and output with the truth.

Used by tests/runtime/test_semantics.py (5 kills) and bench/crash_semantics.py (longer, with a plot).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from confluent_kafka import Producer

from stylus.kafka.admin import delete_topics
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_topic
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.support.cli import ROOT, stylus_env

WINDOW_MS = 1000
PARTITIONS = 2


@dataclass
class CrashRun:
    state_semantics: str | None
    output_semantics: str
    kills: int = 0
    truth: Counter[tuple[int, int]] = field(default_factory=Counter)  # (partition, window) -> count
    state: dict[tuple[int, int], int] = field(default_factory=dict)
    outputs_per_src: Counter[str] = field(default_factory=Counter)
    inputs: list[str] = field(default_factory=list)  # every input's src id
    output_counts: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    output_log: list[tuple[int, str, int]] = field(default_factory=list)  # (out position, src, count)
    kill_positions: list[int] = field(default_factory=list)  # outputs visible at each kill
    hidden_outputs: int = 0  # records a read_uncommitted reader sees and a read_committed one does not (aborted)
    with_record_ids: int = 0  # outputs carrying a `stylus.id` header
    log: str = ""

    # ---- the promises of docs/semantics.md, checked ---------------------------------------------
    def state_violations(self) -> list[str]:
        bad = []
        for key, truth in self.truth.items():
            got = self.state.get(key, 0)
            if self.state_semantics == "at_least_once" and got < truth:
                bad.append(f"{key}: state {got} < truth {truth} (lost input)")
            elif self.state_semantics == "at_most_once" and got > truth:
                bad.append(f"{key}: state {got} > truth {truth} (counted twice)")
            elif self.state_semantics == "exactly_once" and got != truth:
                bad.append(f"{key}: state {got} != truth {truth}")
        return bad

    def output_violations(self) -> list[str]:
        bad = []
        for src in self.inputs:
            n = self.outputs_per_src.get(src, 0)
            if self.output_semantics == "at_least_once" and n < 1:
                bad.append(f"{src}: no output (lost)")
            elif self.output_semantics == "at_most_once" and n > 1:
                bad.append(f"{src}: {n} outputs (duplicated)")
            elif self.output_semantics == "exactly_once" and n != 1:
                bad.append(f"{src}: {n} outputs")
        if self.output_semantics == "exactly_once" and self.state_semantics == "exactly_once":
            for key, truth in self.truth.items():
                if sorted(self.output_counts.get(key, [])) != list(range(1, truth + 1)):
                    bad.append(f"{key}: output counts are not exactly 1..{truth}")
        return bad


def _pipeline_doc(name: str, topic_in: str, topic_out: str, state: str | None, output: str, state_dir: Path,
                  interval: str, window_ms: int = WINDOW_MS, output_ids: str | None = None,
                  processor: Mapping[str, Any] | None = None) -> dict[str, object]:
    semantics: dict[str, str] = {"output": output}
    if state:
        semantics["state"] = state
    if output_ids:
        semantics["output_ids"] = output_ids
    return {
        "pipeline": name,
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}},
        "topics": {topic_in: {"partitions": PARTITIONS}, topic_out: {"partitions": PARTITIONS}},
        "processors": {
            "counter": {
                "class": "processors.counter:CounterNode",
                "inputs": [topic_in],
                "outputs": [topic_out],
                "config": {"window": f"{window_ms}ms"},
                "semantics": semantics,
                "checkpoint": {"interval": interval},
                "state": {"dir": str(state_dir)},
                **(processor or {}),
            }
        },
    }


class _Feeder(threading.Thread):
    """Produces keyed records at a steady rate with event times 10 ms apart, until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.topic, self.rate, self.rng = topic, rate, random.Random(seed)
        self.stop_flag = threading.Event()
        self.sent = 0

    def run(self) -> None:
        base = 1_700_000_000_000
        started = time.monotonic()
        while not self.stop_flag.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                key = f"k{self.rng.randrange(50)}".encode()
                self.producer.produce(self.topic, b"{}", key, timestamp=base + self.sent * 10)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)


def _worker_cmd(pipeline_path: Path, ordering: tuple[str, ...] | None, *extra: str) -> list[str]:
    if ordering is None:
        return [sys.executable, "-m", "stylus", "run", str(pipeline_path), "--processor", "counter", *extra]
    return [sys.executable, "-m", "tests.apps.run_with_ordering", str(pipeline_path), "counter", ",".join(ordering),
            *extra]


def _wait_for(path: Path, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def run_crash_harness(
    bootstrap: str,
    workdir: Path,
    state: str | None,
    output: str,
    *,
    kills: int = 5,
    rate: int = 2000,
    seed: int = 0,
    ordering: tuple[str, ...] | None = None,
    fault: str | None = None,
    interval: str = "100ms",
    window_ms: int = WINDOW_MS,
    output_ids: str | None = None,
    settle: float = 0.0,
    processor: Mapping[str, Any] | None = None,
) -> CrashRun:
    """With `fault` (e.g. "offsets:3"), the single crash is the injected one instead of random kills;
    `settle` seconds of pause at that point first (the client threads go on: a transaction's records then
    surely reach the broker before the kill). `output_ids`: exactly-once output's `semantics.output_ids`
    (default: auto). `processor`: keys laid over the Counter Node's processor entry (another class with the
    same outputs, `concurrency`, ...)."""
    rng = random.Random(seed)
    suffix = uuid.uuid4().hex[:6]
    topic_in, topic_out = f"crash-in-{suffix}", f"crash-out-{suffix}"
    name = f"crash-{suffix}"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "pipeline.yaml"
    path.write_text(yaml.safe_dump(_pipeline_doc(name, topic_in, topic_out, state, output, workdir / "state",
                                                 interval, window_ms, output_ids, processor)))
    log = workdir / "worker.log"
    env = stylus_env(bootstrap)
    run = CrashRun(state, output)
    subprocess.run([sys.executable, "-m", "stylus", "topics", "create", str(path)], env=env, check=True,
                   capture_output=True, cwd=ROOT)
    feeder = _Feeder(bootstrap, topic_in, rate, seed)
    feeder.start()
    try:
        rounds = 1 if fault else kills
        for i in range(rounds):
            marker = f"--- run {i}\n"
            with open(log, "a") as fh:
                fh.write(marker)
            child_env = dict(env, **({"STYLUS_FAULT_KILL_AFTER": fault} if fault else {}))
            if fault and settle:
                child_env["STYLUS_FAULT_PAUSE_AFTER"] = f"{fault}:{settle}"
            with open(log, "ab") as out:
                proc = subprocess.Popen(_worker_cmd(path, ordering), env=child_env, stdout=out,
                                        stderr=subprocess.STDOUT, cwd=ROOT)
            if fault:
                proc.wait(timeout=120)
            else:
                _wait_for_run(log, marker, timeout=60)
                time.sleep(rng.uniform(0.2, 1.5))
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
            if proc.returncode == -signal.SIGKILL:
                run.kills += 1
                run.kill_positions.append(_visible_outputs(bootstrap, topic_out))
    finally:
        feeder.stop_flag.set()
        feeder.join()
    with open(log, "a") as fh:
        fh.write("--- drain\n")
    with open(log, "ab") as out:
        drain = subprocess.run(_worker_cmd(path, ordering, "--exit-when-idle", "3"), env=env, stdout=out,
                               stderr=subprocess.STDOUT, timeout=180, cwd=ROOT)
    run.log = log.read_text(errors="replace")
    if drain.returncode != 0:
        raise RuntimeError(f"drain run failed ({drain.returncode}):\n{run.log[-3000:]}")
    try:
        _collect(run, bootstrap, topic_in, topic_out, workdir / "state" / name / "counter", window_ms)
    except TimeoutError as exc:  # an output partition stays blocked by an open transaction: show the runs
        raise TimeoutError(f"{exc}\n{blocked_tail(bootstrap, topic_out)}\nworker log ({log}), last part:\n"
                           f"{run.log[-6000:]}") from exc
    delete_topics(bootstrap, [topic_in, topic_out, f"{name}.counter.dlq"])
    return run


def _wait_for_run(log: Path, marker: str, timeout: float) -> None:
    """Wait until the current run has been assigned its partitions (so the kill lands mid-processing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "assigned" in text.rpartition(marker)[2]:
            return
        time.sleep(0.05)


def blocked_tail(bootstrap: str, topic: str) -> str:
    """Post-mortem of a blocked read: per output partition, how far read_committed gets and the ids of the
    records after that point (read_uncommitted), i.e. whose transaction is still open."""
    lines = []
    committed = {}
    for msg in read_topic(bootstrap, topic, isolation="read_committed", timeout=5, partial=True):
        committed[msg.partition()] = msg.offset()
    for msg in read_topic(bootstrap, topic, isolation="read_uncommitted", timeout=10):
        if msg.offset() > committed.get(msg.partition(), -1):
            ids = [v for k, v in msg.headers() or [] if k == "stylus.id"]
            lines.append(f"  [{msg.partition()}]@{msg.offset()} beyond read_committed: {ids}")
    shown = lines if len(lines) <= 18 else [*lines[:12], "  ...", *lines[-6:]]
    return f"last read_committed offsets {committed}; after them:\n" + "\n".join(shown)


def _visible_outputs(bootstrap: str, topic: str) -> int:
    """The output topic's size at a kill. Not a read_committed read: a transaction abandoned by the kill holds
    such readers back until the next owner of its transactional id aborts it."""
    ends = end_offsets(bootstrap, [(topic, p) for p in range(PARTITIONS)])
    return sum(high for _, high in ends.values())


def _collect(run: CrashRun, bootstrap: str, topic_in: str, topic_out: str, state_root: Path,
             window_ms: int) -> None:
    for msg in read_topic(bootstrap, topic_in):
        run.inputs.append(f"{topic_in}:{msg.partition()}:{msg.offset()}")
        ts = msg.timestamp()[1]
        run.truth[(msg.partition(), ts - ts % window_ms)] += 1
    committed = read_topic(bootstrap, topic_out)
    run.hidden_outputs = len(read_topic(bootstrap, topic_out, isolation="read_uncommitted")) - len(committed)
    for position, msg in enumerate(committed):
        run.with_record_ids += any(name == "stylus.id" for name, _ in msg.headers() or [])
        value = orjson.loads(msg.value())
        run.outputs_per_src[value["src"]] += 1
        source_partition = int(value["src"].rsplit(":", 2)[1])
        run.output_counts.setdefault((source_partition, value["window"]), []).append(value["count"])
        run.output_log.append((position, value["src"], value["count"]))
    if run.state_semantics is None:
        return
    for partition in range(PARTITIONS):
        db = state_root / f"{topic_in}-{partition}"
        if not db.exists():
            continue
        store = PartitionStore(RocksKV(db))
        try:
            for key, count in store.state.items():
                run.state[(partition, int(key))] = int(count)
        finally:
            store.close()


if __name__ == "__main__":  # manual use: python -m tests.runtime.crash_harness BOOTSTRAP STATE OUTPUT
    result = run_crash_harness(sys.argv[1], Path(f"/tmp/crash-{os.getpid()}"), sys.argv[2] or None, sys.argv[3])
    print(result.kills, result.state_violations()[:5], result.output_violations()[:5])
