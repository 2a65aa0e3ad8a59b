"""The Nexmark SQL apps (pipelines/nexmark/sql.yaml) on the broker and on Spark: streamed once, all eight apps
together, then every processor of every app backfilled over the same input range (the events, or for a later stage
the topic the stream wrote between the stages: the QUALIFY apps' candidates, a join's re-keyed rows, the joined
rows) emits exactly what the stream wrote, and each app's table equals the reference rows (q3's lookups read the
person table on Spark as of each auction's time, docs/tables.md; the stream's as loaded before it started); a
QUALIFY app backfilled by its name from the bids (its stages chained through a
scratch topic) emits its table as the stream did."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import murmur2

from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.config import Pipeline, load_pipeline
from stylus.eventtime.control import is_control
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from stylus.nexmark import Event, GeneratorConfig, generate, reference
from stylus.nexmark import bids as bids_of
from stylus.nexmark.kafka import produce
from stylus.nexmark.model import topics
from stylus.runtime.runner import PipelineRunner
from stylus.sql.expand import stages_of
from tests.support.kafka import read_raw
from tests.support.threads import join_runner

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8"]
#: the processors each app runs as: a QUALIFY app `<name>.partial` and `<name>`; a window join `.left`, `.right` and
#: the join (then q4's windowed table)
STAGES = {"q3": 1, "q4": 4, "q5": 2, "q7": 2, "q8": 3}
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
Item = tuple[str | None, bytes, int]  # key, value (canonical JSON), timestamp


@dataclass
class Streamed:
    pipeline: Pipeline
    bids: list[Any]
    events: dict[str, list[Any]]  # kind -> its values, as `reference.split` gives them
    far: int  # the closing events' time: every window of the data ends by it, none of theirs does
    outputs: dict[str, Counter[Item]]  # processor -> what the stream wrote to its output topic


def isolated(pipeline: Pipeline, suffix: str, state_dir: Path) -> Pipeline:
    """The pipeline with topic and pipeline names of its own (the broker is shared by the session's tests)."""
    rename = {t: f"{t}-{suffix}" for t in pipeline.topics}
    processors = {name: spec.model_copy(update={
        "inputs": tuple(rename[t] for t in spec.inputs), "outputs": tuple(rename[t] for t in spec.outputs),
        "state": spec.state.model_copy(update={"dir": str(state_dir)})}) for name, spec in pipeline.processors.items()}
    tables = {name: t.model_copy(update={"topic": rename[t.topic]}) for name, t in pipeline.tables.items()}
    return pipeline.model_copy(update={"pipeline": f"{pipeline.pipeline}-{suffix}", "processors": processors,
                                       "topics": {rename[t]: s for t, s in pipeline.topics.items()},
                                       "tables": tables})


def written(bootstrap: str, topic: str) -> Counter[Item]:
    """What a topic holds (committed), watermark control records aside."""
    return Counter((None if (key := m.key()) is None else key.decode(), orjson.dumps(orjson.loads(m.value() or b"")),
                    m.timestamp()[1]) for m in read_raw(bootstrap, topic) if not is_control(m.headers()))


def closing_events(at: int, partitions: int) -> list[Event]:
    """One person, auction and bid at `at` on every partition (ids whose keys land there, which no generated event
    has): the watermark of every partition passes every window of the data, and the windows of these never close,
    on the stream or on Spark. The auctions are of no category q3 keeps, by a seller who is nobody."""
    ids: dict[int, int] = {}
    candidate = 10**9
    while len(ids) < partitions:
        ids.setdefault(murmur2(str(candidate).encode(), partitions), candidate)
        candidate += 1
    return [event for n in ids.values() for event in (
        Event("person", {"id": n, "name": "z", "emailAddress": "z", "creditCard": "z", "city": "z", "state": "z",
                         "dateTime": at, "extra": ""}),
        Event("auction", {"id": n, "itemName": "z", "description": "z", "initialBid": 1, "reserve": 1,
                          "dateTime": at, "expires": at, "seller": 1, "category": -1, "extra": ""}),
        Event("bid", {"auction": n, "bidder": 1, "price": 1, "channel": "Google", "url": "u", "dateTime": at,
                      "extra": ""}))]


def own(pipeline: Pipeline, name: str, live: Counter[Item]) -> Counter[Item]:
    """What processor `name` wrote of its output topic: a window join's two sides write one topic, each row tagged
    with its side (`@`)."""
    spec = pipeline.processors[name]
    if spec.class_ != "stylus.sql.joinstage:SqlJoinSide":
        return live
    side = spec.config["sql"]["plan"]["side"]
    return Counter({item: n for item, n in live.items() if orjson.loads(item[1])["@"] == side})


@pytest.fixture(scope="module")
def streamed(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streamed]:
    """10,000 events (200 persons, 600 auctions, 9,200 bids: 50 s of event time), then the closing events; all
    eight apps run once, every event written before they start (so q3's person table is whole before its first
    auction)."""
    loaded = load_pipeline(ROOT / "pipelines" / "nexmark" / "sql.yaml")
    suffix = uuid.uuid4().hex[:6]
    pipeline = isolated(loaded, suffix, tmp_path_factory.mktemp("nexmark-sql-state"))
    names = {kind: f"{topic}-{suffix}" for kind, topic in topics().items()}
    partitions = pipeline.topics[names["bid"]].partitions
    assert all(pipeline.topics[t].partitions == partitions for t in names.values())
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        events = generate(10_000, GeneratorConfig(seed=12, rate=200))
        far = events[-1].value["dateTime"] + 100_000
        events += closing_events(far, partitions)
        produce(bootstrap, events, names=names)
        runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=2.0)
        thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
        thread.start()
        join_runner(runner, thread, timeout=300)
        outputs = {name: written(bootstrap, spec.outputs[0]) for name, spec in pipeline.processors.items()}
        yield Streamed(pipeline, bids_of(events), reference.split(events), far, outputs)
    finally:
        delete_topics(bootstrap, list(pipeline_topics(pipeline)))


@pytest.mark.parametrize("query", QUERIES)
def test_the_backfill_of_every_stage_emits_what_the_stream_did(query: str, streamed: Streamed, spark: Any,
                                                                bootstrap: str) -> None:
    pipeline = streamed.pipeline
    stages = stages_of(pipeline, query)
    assert len(stages) == STAGES.get(query, 1)
    for name in stages:
        plan = plan_for(pipeline, name, bootstrap, EARLIEST, LATEST, chunk_size=2000)
        result = run_plan(spark, pipeline, name, plan, OutputTarget(kind="collect"))
        backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
        live = own(pipeline, name, streamed.outputs[name])
        assert sum(live.values()) > 0
        assert backfilled == live, (name, list((backfilled - live).items())[:2], list((live - backfilled).items())[:2])
    (last,) = [n for n in stages if pipeline.processors[n].outputs[0].startswith(f"nexmark_{query}-")]  # the table
    table = [orjson.loads(value) for (_, value, _), n in streamed.outputs[last].items() for _ in range(n)]
    events = streamed.events
    expected = reference.run(query, events["bid"], watermark=streamed.far, persons=events["person"],
                             auctions=events["auction"])
    assert len(expected) >= {"q2": 20, "q3": 90, "q4": 20, "q5": 9, "q7": 4, "q8": 30}.get(query, 9_000)
    assert reference.diff(query, table, expected) == ""



@pytest.mark.parametrize("query", sorted(reference.WINDOWED))
def test_the_backfill_of_an_app_from_the_bids_emits_its_table(query: str, streamed: Streamed, spark: Any,
                                                              bootstrap: str) -> None:
    """`stylus backfill --processor q5` over the bids: the app's window stage runs first into a scratch topic, then
    its merge, and the table is what the stream wrote (stylus/backfill/chain.py)."""
    from stylus.backfill.runner import backfill

    result = backfill(spark, streamed.pipeline, query, bootstrap, EARLIEST, LATEST,
                      output=OutputTarget(kind="collect"), chunk_size=2000)
    assert [r.processor for r in result.upstream] == [f"{query}.partial"]
    assert result.upstream[0].records == len(streamed.bids)
    backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
    assert backfilled == streamed.outputs[query]


@pytest.mark.parametrize("query", sorted(reference.WINDOWED_JOINS))
def test_the_backfill_of_a_join_app_from_its_streams_emits_its_table(query: str, streamed: Streamed, spark: Any,
                                                                    bootstrap: str) -> None:
    """`stylus backfill --processor` on a window join app's table: the join's two sides run first over the events
    (each from its own stream) into one scratch topic, then the join, and for q4 the table after it; the table is
    what the stream wrote."""
    from stylus.backfill.runner import backfill

    pipeline = streamed.pipeline
    stages = stages_of(pipeline, query)
    (last,) = [n for n in stages if pipeline.processors[n].outputs[0].startswith(f"nexmark_{query}-")]
    result = backfill(spark, pipeline, last, bootstrap, EARLIEST, LATEST, output=OutputTarget(kind="collect"),
                      chunk_size=2000)
    assert sorted(r.processor for r in result.upstream) == sorted(set(stages) - {last})
    backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
    assert sum(backfilled.values()) > 0
    assert backfilled == streamed.outputs[last]
