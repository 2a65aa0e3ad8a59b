"""Apache Kafka restarted on its data in the middle of an exactly-once run: nothing lost, nothing duplicated.

The broker of this test's own (restarting the session's would stall every other test) is stopped while a
real `stylus run` process consumes, produces and commits transactions, then started again on the same ports
and data; input keeps arriving. The processor rides it out on librdkafka's retries, or replays from its last
commit when a transaction is lost with the broker, and the output read `read_committed` holds every count
exactly once."""

from __future__ import annotations

import collections
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import load_pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from tests.state.helpers import caught_up, read_state, wait_for
from tests.support.cli import ROOT, start_stylus, stylus_cmd, stylus_env
from tests.support.kafka import produce, read_json

PARTS = 2
KEYS = [f"w{i}" for i in range(20)]


def batch(start: int, n: int) -> list[tuple[str, dict[str, int]]]:
    return [(KEYS[(start + i) % len(KEYS)], {"n": start + i}) for i in range(n)]


@pytest.mark.parametrize("crash", [False, True], ids=["clean-restart", "sigkill-restart"])
def test_a_broker_restart_mid_run_keeps_exactly_once_exact(tmp_path: Path, crash: bool) -> None:
    doc: dict[str, Any] = {
        "pipeline": "restart",
        "topics": {"words": {"partitions": PARTS}, "counts": {"partitions": PARTS}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"}, "checkpoint": {"interval": "300ms"},
            "state": {"dir": str(tmp_path / "state")},
        }},
    }
    path = tmp_path / "restart.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pipeline = load_pipeline(path)
    group = pipeline.group_id("counter")
    with EmbeddedBroker(data_dir=tmp_path / "kafka") as broker:
        bootstrap = broker.bootstrap
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        sent = produce(bootstrap, "words", batch(0, 3000))
        proc = start_stylus("run", str(path), bootstrap=bootstrap, log=tmp_path / "run.log")
        try:
            wait_for(lambda: caught_up(bootstrap, group, "words", PARTS), 60, "the first records to be committed")
            sent += produce(bootstrap, "words", batch(sent, 2000))
            broker.restart(crash=crash)  # mid-stream: the new records are being processed
            sent += produce(bootstrap, "words", batch(sent, 2000))
            wait_for(lambda: caught_up(bootstrap, group, "words", PARTS), 120, "the run to catch up after the restart")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, (tmp_path / "run.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        expected = collections.Counter(KEYS[i % len(KEYS)] for i in range(sent))
        assert read_state(tmp_path / "state" / pipeline.pipeline / "counter") == dict(expected)
        per_key: dict[str, list[int]] = collections.defaultdict(list)
        for out in read_json(bootstrap, "counts", isolation="read_committed"):
            per_key[out["word"]].append(out["count"])
        assert {k: sorted(v) for k, v in per_key.items()} == {k: list(range(1, n + 1)) for k, n in expected.items()}


@pytest.mark.parametrize(("state", "pause_after"), [("at_least_once", "state"), ("exactly_once", "emit")],
                         ids=["alo-alo", "eo-alo"])
def test_an_offsets_commit_while_the_broker_is_away_waits_for_it(tmp_path: Path, state: str, pause_after: str) -> None:
    """The broker stops between a checkpoint's output flush and its offsets commit, for longer than
    `session.timeout.ms`: librdkafka holds the commit back that long while it looks for the group's coordinator,
    then fails it (`_WAIT_COORD`). The worker commits again until the broker is back, rather than stop on it
    (chaos matrix, broker restarts: an instance exited with code 1 in about a third of them)."""
    doc: dict[str, Any] = {
        "pipeline": "away",
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}},
        "topics": {"words": {"partitions": PARTS}, "counts": {"partitions": PARTS}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": state, "output": "at_least_once"}, "checkpoint": {"interval": "200ms"},
            "state": {"dir": str(tmp_path / "state")},
        }},
    }
    path = tmp_path / "away.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pipeline = load_pipeline(path)
    group = pipeline.group_id("counter")
    log = tmp_path / "run.log"
    with EmbeddedBroker(data_dir=tmp_path / "kafka") as broker:
        bootstrap = broker.bootstrap
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        sent = produce(bootstrap, "words", batch(0, 3000))
        # the checkpoint stalls after its step before the offsets commit: the broker goes away meanwhile
        env = stylus_env(bootstrap) | {"STYLUS_FAULT_PAUSE_AFTER": f"{pause_after}:1:6"}
        with open(log, "ab") as out:
            proc = subprocess.Popen(stylus_cmd("run", str(path)), env=env, cwd=ROOT, stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "fault injected: pausing" in log.read_text(errors="replace"), 60, "the stalled checkpoint")
            broker.stop()
            wait_for(lambda: proc.poll() is not None or "coordinator is away" in log.read_text(errors="replace"), 60,
                     "the commit to find the coordinator away")
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            broker.start()
            sent += produce(bootstrap, "words", batch(sent, 1000))
            wait_for(lambda: caught_up(bootstrap, group, "words", PARTS), 120, "the run to catch up after the restart")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, log.read_text(errors="replace")[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        expected = collections.Counter(KEYS[i % len(KEYS)] for i in range(sent))
        got = read_state(tmp_path / "state" / pipeline.pipeline / "counter")
        if state == "exactly_once":
            assert got == dict(expected)
        else:
            assert set(got) == set(expected) and all(got[k] >= n for k, n in expected.items())
        per_key: dict[str, set[int]] = collections.defaultdict(set)
        for out_record in read_json(bootstrap, "counts"):
            per_key[out_record["word"]].add(out_record["count"])
        assert set(per_key) == set(expected)
        if state == "exactly_once":  # exact counts: every count of every word went out at least once
            assert all(per_key[k] >= set(range(1, n + 1)) for k, n in expected.items())
