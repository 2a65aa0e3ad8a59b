"""The same counting pipeline with RocksDB state and with PostgreSQL monoid state gives identical, exact
results across SIGKILLs of a real `stylus run` process at random points while input keeps arriving."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.monoid.helpers import stored_offsets, table_contents
from tests.support.cli import start_stylus
from tests.support.kafka import produce

PARTITIONS = 3
TOTAL = 12_000
KEYS = 40
WINDOW_MS = 1000
BASE_TS = 1_700_000_000_000


def _records(seed: int) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(KEYS)}", {"ts": BASE_TS + rng.randrange(10 * WINDOW_MS), "i": i})
            for i in range(TOTAL)]


def _truth(records: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    return dict(Counter(f"{key}|{value['ts'] - value['ts'] % WINDOW_MS}" for key, value in records))


def _rocksdb_state(state_dir: Path, pipeline: str, processor: str, topic: str) -> dict[str, int]:
    merged: dict[str, int] = {}
    for partition in range(PARTITIONS):
        path = state_dir / pipeline / processor / f"{topic}-{partition}"
        if not path.exists():
            continue
        store = PartitionStore(RocksKV(path))
        for key, value in store.state.items():
            merged[key] = merged.get(key, 0) + value
        store.close()
    return merged


@pytest.mark.slow
def test_rocksdb_and_postgres_counts_are_identical_and_exact_across_sigkills(
    bootstrap: str, pipeline_factory: Any, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STYLUS_PG_DSN", pg_dsn)  # `${STYLUS_PG_DSN}`, expanded here and in the subprocess
    counter = {"class": "processors.counters:EventCounter", "inputs": ["events"], "config": {"window": "1s"},
               "semantics": {"state": "exactly_once", "output": "at_least_once"}, "checkpoint": {"interval": "300ms"},
               "batch_size": 500, "kafka": {"consumer": {"session.timeout.ms": 3000}}}  # a killed member leaves sooner
    path, pipeline = pipeline_factory({
        "pipeline": "monoid-kill",
        "topics": {"events": {"partitions": PARTITIONS}},
        "processors": {
            "local": counter,
            "remote": {**counter, "state": {"backend": "postgres", "dsn": "${STYLUS_PG_DSN}"}},
        },
    })
    topic = next(iter(pipeline.topics))
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)  # before producing: no auto-created topic
    records = _records(seed=4)
    rng = random.Random(11)
    log = tmp_path / "stylus.log"

    def feed() -> None:  # input keeps arriving while the process is killed and restarted
        for start in range(0, TOTAL, 400):
            produce(bootstrap, topic, records[start:start + 400])
            time.sleep(0.3)

    producer = threading.Thread(target=feed)
    producer.start()
    mid_stream_kills = 0
    try:
        for _ in range(3):
            proc = start_stylus("run", str(path), bootstrap=bootstrap, log=log)
            time.sleep(rng.uniform(4.0, 6.0))  # the group join takes ~3 s, then it processes
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            done = sum(o or 0 for o in stored_offsets(pg_dsn).values())
            mid_stream_kills += 0 < done < TOTAL
    finally:
        producer.join(60)
    final = start_stylus("run", str(path), "--exit-when-idle", "2", bootstrap=bootstrap, log=log)
    assert final.wait(120) == 0, log.read_text()[-3000:]

    truth = _truth(records)
    remote = table_contents(pg_dsn, pipeline, "remote")
    local = _rocksdb_state(Path(pipeline.processors["local"].state.dir), pipeline.pipeline, "local", topic)
    assert mid_stream_kills >= 1, log.read_text()[-3000:]  # at least one kill landed mid-stream
    assert sum(truth.values()) == TOTAL
    assert remote == truth
    assert local == truth
    assert sum(o or 0 for o in stored_offsets(pg_dsn).values()) == TOTAL
    state_dir = Path(pipeline.processors["remote"].state.dir) / pipeline.pipeline
    assert not (state_dir / "remote").exists()  # no local state: offsets and values live in the database
