"""A SQL app's stage behind other stages of its app, backfilled from the app's input: `stylus backfill`/`replay` of
a QUALIFY table (window stage per partition, then the merge), of a windowed table behind its shuffle, and of both
(shuffle, ranking per partition, merge) give, over the input the stream read, the rows the stream wrote, without
reading the topics between the stages (stylus/backfill/chain.py)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from stylus.backfill.bounds import parse_bound
from stylus.backfill.chain import chain_of, internal_topics, with_scratch_topics
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.runner import backfill
from stylus.config import Pipeline, load_pipeline
from stylus.eventtime.control import is_control
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from tests.sql.helpers import FAR, app_sql, events, write_app
from tests.support.cli import run_stylus
from tests.support.kafka import read_raw

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
Item = tuple[str | None, bytes, int]  # key, value (canonical JSON), timestamp

#: name -> (query, the processors the app runs as). Sums are of integers: behind a shuffle, the order in which a
#: group's rows arrive depends on how the stages' outputs interleave, on the stream as on Spark, and a float sum
#: can differ in its last bits with the order of its additions
APPS = {
    "qualify-on-aggregates": (
        "  SELECT category, COUNT(*) AS n, SUM(user_id) AS users\n"
        "  FROM events_score\n"
        "  GROUP BY category, HOP(event_time, INTERVAL '30' SECOND, INTERVAL '1' MINUTE)\n"
        "  QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY n DESC) <= 2;\n",
        ["app.shuffle", "app.partial", "app"]),
    "qualify-on-group-columns": (
        "  SELECT category, event, score\n"
        "  FROM events_score\n"
        "  GROUP BY category, event, score, TUMBLE(event_time, INTERVAL '1' MINUTE)\n"
        "  QUALIFY DENSE_RANK() OVER (PARTITION BY window_start, category ORDER BY score DESC) <= 2;\n",
        ["app.partial", "app"]),
    "figure-2-behind-its-shuffle": (
        "  SELECT category, event, topk(score, 3) AS score\n"
        "  FROM events_score [2 minutes];\n",
        ["app.shuffle", "app"]),
}


def test_the_chain_of_a_stage_is_its_app_upstream_of_it() -> None:
    nexmark = load_pipeline(ROOT / "pipelines" / "nexmark" / "sql.yaml")
    assert chain_of(nexmark, "q5") == ["q5.partial", "q5"]
    assert chain_of(nexmark, "q7.partial") == ["q7.partial"]
    assert chain_of(nexmark, "q0") == ["q0"]
    assert internal_topics(nexmark, ["q5.partial", "q5"]) == ["nexmark-sql.q5.partial"]
    renamed = with_scratch_topics(nexmark, {"nexmark-sql.q5.partial": "scratch"})
    assert renamed.processors["q5.partial"].outputs == ("scratch",) == renamed.processors["q5"].inputs
    assert "scratch" in renamed.topics and "nexmark-sql.q5.partial" not in renamed.topics
    trending = load_pipeline(ROOT / "pipelines" / "trending_events_sql.yaml")
    assert chain_of(trending, "ranker") == ["ranker"]  # Python processors: one at a time, as ever
    assert chain_of(trending, "ranker_sql") == ["ranker_sql"]  # one stage: keyed input, no shuffle


@dataclass
class Streamed:
    path: Path
    pipeline: Pipeline
    table: str
    rows: int
    live: Counter[Item]


def written(bootstrap: str, topic: str) -> Counter[Item]:
    return Counter((None if (key := m.key()) is None else key.decode(), orjson.dumps(orjson.loads(m.value() or b"")),
                    m.timestamp()[1]) for m in read_raw(bootstrap, topic) if not is_control(m.headers()))


@pytest.fixture(params=sorted(APPS))
def streamed(request: pytest.FixtureRequest, tmp_path: Path, bootstrap: str) -> Iterator[Streamed]:
    """The app run once by `stylus run` over rows spread on three partitions, then a far-future row on each (every
    window of the rows closes, on the stream and on Spark)."""
    query, stages = APPS[request.param]
    suffix = uuid.uuid4().hex[:6]
    source, table = f"events-{suffix}", f"chained_{suffix}"
    path = write_app(tmp_path, app_sql(source, table, query), topics={source: PARTITIONS, table: 2},
                     pipeline=f"sql-chain-{suffix}", processor={"checkpoint": {"interval": "300ms"},
                                                                "event_time": {"allowed_lateness": "10s"}})
    pipeline = load_pipeline(path)
    assert list(pipeline.processors) == stages
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        rows = events(500, seed=11)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i, row in enumerate(rows):
            producer.produce(source, json.dumps(row).encode(), partition=i % PARTITIONS)
        for p in range(PARTITIONS):
            producer.produce(source, json.dumps({"event_time": FAR, "event": "end", "category": "end", "score": 0,
                                                 "user_id": 0}).encode(), partition=p)
        assert producer.flush(30) == 0
        done = run_stylus("run", str(path), "--exit-when-idle", "2", bootstrap=bootstrap, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        live = written(bootstrap, table)
        assert sum(live.values()) > 20
        yield Streamed(path, pipeline, table, len(rows) + PARTITIONS, live)
    finally:
        delete_topics(bootstrap, list(pipeline_topics(pipeline)))


def test_a_stage_behind_its_app_backfills_from_the_input_to_what_the_stream_wrote(
        streamed: Streamed, spark: Any, bootstrap: str) -> None:
    pipeline = streamed.pipeline
    chain = chain_of(pipeline, "app")
    delete_topics(bootstrap, internal_topics(pipeline, chain))  # what the stream wrote between the stages: unused
    before = set(topic_partitions_names(bootstrap))
    result = backfill(spark, pipeline, "app", bootstrap, EARLIEST, LATEST, output=OutputTarget(kind="collect"),
                      chunk_size=200)
    assert [r.processor for r in result.upstream] == chain[:-1]
    assert result.upstream[0].records == streamed.rows  # the first stage read the app's input, all of it
    backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
    assert backfilled == streamed.live, (list((backfilled - streamed.live).items())[:2],
                                         list((streamed.live - backfilled).items())[:2])
    assert set(topic_partitions_names(bootstrap)) <= before  # the scratch topics are gone


def topic_partitions_names(bootstrap: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    return list(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


@pytest.mark.parametrize("streamed", ["qualify-on-aggregates"], indirect=True)
def test_replay_diff_of_a_qualify_app_finds_no_difference(streamed: Streamed, bootstrap: str) -> None:
    shadow = f"shadow-{uuid.uuid4().hex[:6]}"
    try:
        done = run_stylus("replay", str(streamed.path), "--processor", "app", "--shadow", shadow, "--diff",
                          "--master", "local[2]", "--no-progress", bootstrap=bootstrap, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "app.shuffle: 503 records" in done.stdout and "app.partial:" in done.stdout, done.stdout
        assert f"no differences: {sum(streamed.live.values())} outputs match" in done.stdout, done.stdout
    finally:
        delete_topics(bootstrap, [shadow])
