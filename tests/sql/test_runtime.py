"""The Figure 2 app on the real broker through `stylus run`: its rows equal the plain-Python computation. The
input has three partitions, so the app runs as its shuffle and its window stage (exactly-once between them:
transactions, watermarks through control records); `--processor top_events` names the app and runs both."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from stylus.config import Pipeline, load_pipeline
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from tests.sql.helpers import FAR, app_sql, canonical, events, top_events, write_app
from tests.support.cli import run_stylus
from tests.support.kafka import read_json

PARTITIONS = 3


@pytest.fixture
def figure2(tmp_path: Path, bootstrap: str) -> Iterator[tuple[Path, Pipeline, str, str]]:
    """The Figure 2 app with topic and pipeline names of its own; its topics are deleted afterwards."""
    suffix = uuid.uuid4().hex[:6]
    events_topic, table = f"events-{suffix}", f"top_events_5min_{suffix}"
    sql = app_sql(events_topic, table, "  SELECT category, event, topk(score) AS score\n"
                                       "  FROM events_score [5 minutes];\n", application="top_events")
    path = write_app(tmp_path, sql, topics={events_topic: PARTITIONS, table: 2}, name="top_events",
                     pipeline=f"sql-fig2-{suffix}", processor={"checkpoint": {"interval": "300ms"},
                                                               "event_time": {"allowed_lateness": "10s"}})
    pipeline = load_pipeline(path)
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        yield path, pipeline, events_topic, table
    finally:
        delete_topics(bootstrap, list(pipeline_topics(pipeline)))


def produce_rows(bootstrap: str, topic: str, rows: list[dict[str, Any]], closing: dict[str, Any]) -> None:
    """Rows spread over the partitions in order, then one far-future row on every partition: the watermark then
    passes every window of the rows (and the window of the closing rows stays open)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, row in enumerate(rows):
        producer.produce(topic, json.dumps(row).encode(), partition=i % PARTITIONS)
    for p in range(PARTITIONS):
        producer.produce(topic, json.dumps(closing).encode(), partition=p)
    assert producer.flush(30) == 0


def test_figure2_on_the_broker_equals_plain_python(figure2: tuple[Path, Pipeline, str, str], bootstrap: str) -> None:
    path, pipeline, events_topic, table = figure2
    assert list(pipeline.processors) == ["top_events.shuffle", "top_events"]
    rows = events(600, seed=21)
    produce_rows(bootstrap, events_topic, rows,
                 {"event_time": FAR, "event": "end", "category": "end", "score": 0, "user_id": 0})

    done = run_stylus("run", str(path), "--processor", "top_events", "--exit-when-idle", "2", bootstrap=bootstrap,
                      timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"top_events.shuffle: processed {len(rows) + PARTITIONS} records" in done.stdout, done.stdout
    got = read_json(bootstrap, table)
    assert canonical(got) == canonical(top_events(rows))

    lag = run_stylus("lag", str(path), "--json", bootstrap=bootstrap, timeout=60)
    assert lag.returncode == 0, lag.stderr
    assert "top_events.shuffle" in lag.stdout and '"top_events"' in lag.stdout
