"""The Nexmark SQL apps (pipelines/nexmark/sql.yaml) on the broker and on Spark: streamed once, all five apps
together, then every processor of every app backfilled over the same input range (the bids, or for the QUALIFY
apps' merging stage the candidates topic the stream wrote) emits exactly what the stream wrote, and each app's
table equals the reference rows."""

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
from stylus.runtime.runner import PipelineRunner
from stylus.sql.expand import stages_of
from tests.support.kafka import read_raw
from tests.support.threads import join_runner

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ["q0", "q1", "q2", "q5", "q7"]
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
Item = tuple[str | None, bytes, int]  # key, value (canonical JSON), timestamp


@dataclass
class Streamed:
    pipeline: Pipeline
    bids: list[Any]
    far: int  # the closing bids' time: every window of the data ends by it, none of theirs does
    outputs: dict[str, Counter[Item]]  # processor -> what the stream wrote to its output topic


def isolated(pipeline: Pipeline, suffix: str, state_dir: Path) -> Pipeline:
    """The pipeline with topic and pipeline names of its own (the broker is shared by the session's tests)."""
    rename = {t: f"{t}-{suffix}" for t in pipeline.topics}
    processors = {name: spec.model_copy(update={
        "inputs": tuple(rename[t] for t in spec.inputs), "outputs": tuple(rename[t] for t in spec.outputs),
        "state": spec.state.model_copy(update={"dir": str(state_dir)})}) for name, spec in pipeline.processors.items()}
    return pipeline.model_copy(update={"pipeline": f"{pipeline.pipeline}-{suffix}", "processors": processors,
                                       "topics": {rename[t]: s for t, s in pipeline.topics.items()}})


def written(bootstrap: str, topic: str) -> Counter[Item]:
    """What a topic holds (committed), watermark control records aside."""
    return Counter((None if (key := m.key()) is None else key.decode(), orjson.dumps(orjson.loads(m.value() or b"")),
                    m.timestamp()[1]) for m in read_raw(bootstrap, topic) if not is_control(m.headers()))


def closing_bids(at: int, partitions: int) -> list[Event]:
    """One bid at `at` on every partition (auctions whose keys land there): the watermark of every partition
    passes every window of the data, and the windows of these bids never close, on the stream or on Spark."""
    auctions: dict[int, int] = {}
    candidate = 10**9
    while len(auctions) < partitions:
        auctions.setdefault(murmur2(str(candidate).encode(), partitions), candidate)
        candidate += 1
    return [Event("bid", {"auction": a, "bidder": 1, "price": 1, "channel": "Google", "url": "u", "dateTime": at,
                          "extra": ""}) for a in auctions.values()]


@pytest.fixture(scope="module")
def streamed(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streamed]:
    """10,000 events (9,200 bids, 50 s of event time), then the closing bids; all five apps run once."""
    loaded = load_pipeline(ROOT / "pipelines" / "nexmark" / "sql.yaml")
    pipeline = isolated(loaded, uuid.uuid4().hex[:6], tmp_path_factory.mktemp("nexmark-sql-state"))
    bid_topic = pipeline.processors["q0"].inputs[0]
    partitions = pipeline.topics[bid_topic].partitions
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        events = [e for e in generate(10_000, GeneratorConfig(seed=12, rate=200)) if e.kind == "bid"]
        far = events[-1].value["dateTime"] + 100_000
        events += closing_bids(far, partitions)
        produce(bootstrap, events, names={"bid": bid_topic})
        runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=2.0)
        thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
        thread.start()
        join_runner(runner, thread, timeout=300)
        outputs = {name: written(bootstrap, spec.outputs[0]) for name, spec in pipeline.processors.items()}
        yield Streamed(pipeline, bids_of(events), far, outputs)
    finally:
        delete_topics(bootstrap, list(pipeline_topics(pipeline)))


@pytest.mark.parametrize("query", QUERIES)
def test_the_backfill_of_every_stage_emits_what_the_stream_did(query: str, streamed: Streamed, spark: Any,
                                                                bootstrap: str) -> None:
    pipeline = streamed.pipeline
    stages = stages_of(pipeline, query)
    assert len(stages) == (2 if query in reference.WINDOWED else 1)  # a QUALIFY app: `<name>.partial`, `<name>`
    for name in stages:
        plan = plan_for(pipeline, name, bootstrap, EARLIEST, LATEST, chunk_size=2000)
        result = run_plan(spark, pipeline, name, plan, OutputTarget(kind="collect"))
        backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
        live = streamed.outputs[name]
        assert sum(live.values()) > 0
        assert backfilled == live, (name, list((backfilled - live).items())[:2], list((live - backfilled).items())[:2])
    table = [orjson.loads(value) for (_, value, _), n in streamed.outputs[query].items() for _ in range(n)]
    expected = reference.run(query, streamed.bids, watermark=streamed.far)
    assert len(expected) >= {"q2": 20, "q5": 9, "q7": 4}.get(query, 9_000)
    assert reference.diff(query, table, expected) == ""

