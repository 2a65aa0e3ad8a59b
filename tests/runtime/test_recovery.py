"""Opening an assigned partition (stylus/runtime/recovery.py, R1-R5): what recovery applies is what the
processor then runs on, timers included."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import orjson
from confluent_kafka import Producer

from tests.conftest import PipelineFactory
from tests.support.cli import ROOT, run_stylus, stylus_cmd, stylus_env
from tests.support.kafka import read_json

WINDOW_MS = 1000
BASE = 1_700_000_000_000


def test_a_staged_checkpoint_applied_on_recovery_brings_its_timers_with_its_state(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """A SIGKILL after a transaction committed and before its staged change was applied (T3-T4, the window a
    broker restart widens: the chaos matrix's CI seed 524). The restart applies the staged change; the
    timers it fired and set must count with the state it holds, or a window fires a second time with its
    state already deleted and a window opened in it never fires."""
    path, pipeline = pipeline_factory({
        "topics": {"events": {"partitions": 2}, "sums": {"partitions": 1}},
        "processors": {"win": {
            "class": "tests.chaos.apps:TimerWindowSum", "config": {"window_ms": WINDOW_MS},
            "inputs": ["events"], "outputs": ["sums"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "event_time": {"field": "ts", "allowed_lateness": "1s"},
            "checkpoint": {"interval": "200ms"},
        }}})
    events, sums = pipeline.processors["win"].inputs[0], pipeline.processors["win"].outputs[0]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produce(rows: list[dict[str, int | str]]) -> None:
        for row in rows:
            producer.produce(events, orjson.dumps(row), str(row["k"]).encode(), partition=int(row["p"]),
                             timestamp=int(row["ts"]))
        assert producer.flush(30) == 0

    # event time runs on while checkpoints are taken: every checkpoint fires timers and sets new ones
    rows: list[dict[str, int | str]] = [{"k": f"k{i % 6}", "p": i % 6 % 2, "ts": BASE + i * 5, "amount": i % 9 + 1}
                                        for i in range(12_000)]
    rounds = [rows[i:i + 200] for i in range(0, len(rows), 200)]
    log = tmp_path / "run.log"
    env = stylus_env(bootstrap) | {"STYLUS_FAULT_KILL_AFTER": "txn.commit:4"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(stylus_cmd("run", str(path), "--processor", "win"), env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        while rounds and proc.poll() is None:
            produce(rounds.pop(0))
            with contextlib.suppress(subprocess.TimeoutExpired):  # input arrives in rounds, as a stream's does
                proc.wait(0.1)
        assert proc.wait(90) == -signal.SIGKILL, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rounds, "the input ran out before the kill: raise the record count"
    for left in rounds:
        produce(left)
    produce([{"k": f"k{p}", "p": p, "ts": BASE + 10_000_000, "amount": 0} for p in range(2)])  # close every window

    done = run_stylus("run", str(path), "--processor", "win", "--exit-when-idle", "3", bootstrap=bootstrap,
                      timeout=120)
    text = log.read_text(errors="replace") + "--- restart\n" + done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "applying the staged checkpoint" in text  # the kill fell between the commit and the apply

    results = [r for r in read_json(bootstrap, sums) if r["start"] < BASE + 10_000_000 - WINDOW_MS]
    assert [r for r in results if r.get("orphan")] == [], "a timer fired whose window's state was gone"
    truth: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        ts = int(row["ts"])
        window = truth[(str(row["k"]), ts - ts % WINDOW_MS)]
        window[0] += int(row["amount"])
        window[1] += 1
    seen = Counter((r["key"], r["start"]) for r in results)
    assert [w for w, n in seen.items() if n > 1] == [], "a window fired twice"
    got = {(r["key"], r["start"]): [r["sum"], r["n"]] for r in results}
    assert sorted(set(truth) - set(got)) == [], "windows never emitted"
    assert got == dict(truth)
