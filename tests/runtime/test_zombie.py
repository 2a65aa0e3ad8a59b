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
import yaml

from stylus.kafka.reader import read_topic
from tests.conftest import PipelineFactory
from tests.support.cli import ROOT, run_stylus, stylus_cmd, stylus_env
from tests.support.kafka import produce

PARTITIONS = 2


def _wait_for(log: Path, text: str, timeout: float = 60, count: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.1)


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
        _wait_for(log_a, "backed up", count=PARTITIONS)
        feed(3000, 2000)
        time.sleep(0.3)  # A is mid-stream, a transaction open, when it freezes
        a.send_signal(signal.SIGSTOP)
        with open(log_b, "wb") as out:
            b = subprocess.Popen(stylus_cmd("run", str(path_b), "--instance", "b"), env=stylus_env(bootstrap),
                                 stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _wait_for(log_b, "assigned")
        _wait_for(log_b, f"{events}[0]", count=1)
        feed(5000, 2000)
        time.sleep(4)
        a.send_signal(signal.SIGCONT)  # the zombie wakes up believing it owns partitions
        feed(7000, 1000)
        time.sleep(8)
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=60) == 0, log_b.read_text()[-3000:]
    finally:
        a.send_signal(signal.SIGCONT)
        a.send_signal(signal.SIGTERM)
        try:
            a.wait(timeout=60)
        except subprocess.TimeoutExpired:
            a.kill()
        if b is not None and b.poll() is None:
            b.kill()
    text_a = log_a.read_text(errors="replace")
    assert "fenced" in text_a or "lost" in text_a, text_a[-3000:]  # it found out it no longer owns them
    drain = run_stylus("run", str(path_b), "--exit-when-idle", "2", bootstrap=bootstrap, timeout=180)
    assert drain.returncode == 0, drain.stderr[-3000:]
    inputs = {f"{events}:{m.partition()}:{m.offset()}" for m in read_topic(bootstrap, events)}
    outputs = Counter(orjson.loads(m.value())["src"] for m in read_topic(bootstrap, counts))
    assert len(inputs) == 8000
    assert set(outputs) == inputs, "every input has its output"
    assert {n for n in outputs.values()} == {1}, [s for s, n in outputs.items() if n > 1][:10]
