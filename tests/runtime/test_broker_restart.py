"""Apache Kafka restarted on its data in the middle of an exactly-once run: nothing lost, nothing duplicated.

The broker of this test's own (restarting the session's would stall every other test) is stopped while a
real `stylus run` process consumes, produces and commits transactions, then started again on the same ports
and data; input keeps arriving. The processor rides it out on librdkafka's retries, or replays from its last
commit when a transaction is lost with the broker, and the output read `read_committed` holds every count
exactly once."""

from __future__ import annotations

import collections
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import load_pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from tests.state.helpers import caught_up, read_state, wait_for
from tests.support.cli import start_stylus
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
