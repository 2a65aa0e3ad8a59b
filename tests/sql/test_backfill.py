"""The same SQL app on the stream and as a Spark backfill over the same input gives the same rows: a `sql:`
processor is an ordinary processor after loading, so `stylus backfill`/`replay` run its compiled stage
through the existing path (stylus/backfill/)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.config import load_pipeline
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from tests.sql.helpers import FAR, app_sql, events, write_app
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw

EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")


def test_a_windowed_app_backfills_to_what_the_stream_emitted(bootstrap: str, spark: Any, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    source, table = f"events-{suffix}", f"per_minute_{suffix}"
    sql = app_sql(source, table,
                  "  SELECT category, COUNT(*) AS n, SUM(score) AS total, AVG(score) AS mean,\n"
                  "         COUNT(DISTINCT user_id) AS users, TUMBLE_START(event_time, INTERVAL '1' MINUTE) AS ws\n"
                  "  FROM events_score WHERE score > 1\n"
                  "  GROUP BY category, TUMBLE(event_time, INTERVAL '1' MINUTE) HAVING COUNT(*) > 2;\n")
    path = write_app(tmp_path, sql, topics={source: 1, table: 2}, pipeline=f"sql-backfill-{suffix}",
                     processor={"checkpoint": {"interval": "500ms"}, "event_time": {"allowed_lateness": "5s"}})
    pipeline = load_pipeline(path)
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        rows = events(500, seed=5)
        rows.append({"event_time": FAR, "event": "end", "category": "end", "score": 5, "user_id": 0})
        produce(bootstrap, source, rows)
        done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        live = Counter((m.key().decode(), orjson.dumps(orjson.loads(m.value())), m.timestamp()[1])
                       for m in read_raw(bootstrap, table))
        assert sum(live.values()) > 10

        plan = plan_for(pipeline, "app", bootstrap, EARLIEST, LATEST, chunk_size=200)
        result = run_plan(spark, pipeline, "app", plan, OutputTarget(kind="collect"), return_state=True)
        backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
        assert result.records == len(rows)
        assert backfilled == live, (list((backfilled - live).items())[:2], list((live - backfilled).items())[:2])
    finally:
        delete_topics(bootstrap, list(pipeline_topics(pipeline)))
