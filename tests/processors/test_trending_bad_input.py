"""Issue 9: 1% garbage in the trending pipeline's input, every processor exactly-once.

Every garbage record ends up, unchanged, in the Filterer's dead-letter topic with the headers that say
where it came from; every good record's effect is present downstream exactly once: the Filterer's
committed output is what its own code gives on the good records alone, and each later stage's
committed output (and the Scorer's and Ranker's final state) is what a backfill of that stage's
code over its actual input gives (the method of tests/backfill/test_trending_equivalence.py). No
output id repeats in any topic, and no other processor dead-letters anything."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from processors.generator import GeneratorConfig, generate, producer_for
from stylus.api import import_processor_class
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage
from stylus.eventtime.control import is_control
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.runtime.transactions import ID_HEADER
from tests.backfill.test_trending_equivalence import EARLIEST, LATEST, stream_kv, stream_outputs, trending_doc
from tests.support.cli import run_stylus
from tests.support.kafka import offset_holes, read_raw

RECORDS = 3000
GARBAGE_EVERY = 100  # 1%
STAGES = ("filterer", "joiner", "scorer", "ranker")


def garbage(rng: random.Random, i: int) -> bytes:
    """Values the JSON serde cannot decode: broken JSON, bytes that are not UTF-8, truncated records."""
    kinds = [b"{not json %d" % i, bytes([0xFF, 0xFE, i % 256, 0x00]), b'{"event_id": "e1", "ts": ',
             rng.randbytes(16) + b"\x80"]
    return kinds[i % len(kinds)]


def produce_with_garbage(bootstrap: str, topic: str) -> tuple[list[dict[str, Any]], list[bytes]]:
    rng = random.Random(5)
    good = generate(RECORDS, GeneratorConfig(seed=13, rate=20.0))
    bad: list[bytes] = []
    producer = producer_for(bootstrap)
    for i, record in enumerate(good):
        if i % GARBAGE_EVERY == GARBAGE_EVERY // 2:
            value = garbage(rng, i)
            bad.append(value)
            producer.produce(topic, value, record["event_id"].encode(), timestamp=int(record["ts"]))
        producer.produce(topic, orjson.dumps(record), record["event_id"].encode(), timestamp=int(record["ts"]))
        producer.poll(0)
    assert producer.flush(60) == 0
    return good, bad


def exactly_once(doc: dict[str, Any]) -> dict[str, Any]:
    for spec in doc["processors"].values():
        # record ids asked for: the check below that no output is seen twice reads them
        spec["semantics"] = {**spec.get("semantics", {}), "output": "exactly_once", "output_ids": "always"}
        if "state" in spec:
            spec["semantics"]["state"] = "exactly_once"
        spec["checkpoint"] = {"interval": "1s"}
    return doc


def filterer_on(pipeline: Pipeline, good_messages: list[RawMessage]) -> Counter[tuple[Any, ...]]:
    """The Filterer's own code over the good records alone, through the real Engine, no broker."""
    spec = pipeline.processors["filterer"]
    sink = CollectingSink(spec.outputs)
    processor = import_processor_class(spec.class_)(config=spec.config, name="filterer")
    engine = Engine(processor, "filterer", spec, pipeline, sink, RaiseFailures())
    engine.start()
    tasks: dict[tuple[str, int], PartitionTask] = {}
    engine.process_messages(good_messages, lambda t, p: tasks.setdefault((t, p), PartitionTask(t, p, None)))
    return Counter((o.key, orjson.dumps(o.value), o.timestamp) for o in sink.outputs)


def data_records(messages: list[RawMessage]) -> list[RawMessage]:
    return [m for m in messages if not is_control(m.headers())]


def test_one_percent_garbage_under_exactly_once(bootstrap: str, pipeline_factory: Any, spark: Any,
                                               tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(exactly_once(trending_doc(tmp_path / "state")))
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    events = pipeline.processors["filterer"].inputs[0]
    good, bad = produce_with_garbage(bootstrap, events)
    assert len(bad) == RECORDS // GARBAGE_EVERY
    done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=300)
    (tmp_path / "stream.log").write_text(done.stderr)  # the workers' log, for a failure's post-mortem
    assert done.returncode == 0, done.stderr[-3000:]

    # Every bad record is in the Filterer's dead-letter topic, unchanged, once, with where it came from.
    source = read_raw(bootstrap, events)
    bad_offsets = {(m.partition(), m.offset()): m.value() for m in source if m.value() in set(bad)}
    assert len(bad_offsets) == len(bad)
    letters = read_raw(bootstrap, f"{pipeline.pipeline}.filterer.dlq")
    assert Counter(m.value() for m in letters) == Counter(bad)
    where: dict[tuple[int, int], bytes | None] = {}
    for m in letters:
        assert m.headers() is not None
        headers = dict(m.headers() or [])
        assert headers["stylus.error.stage"] == b"decode"
        assert headers["stylus.source.topic"].decode() == events
        where[(int(headers["stylus.source.partition"]), int(headers["stylus.source.offset"]))] = m.value()
    assert where == bad_offsets
    for name in STAGES[1:]:
        assert read_raw(bootstrap, f"{pipeline.pipeline}.{name}.dlq") == [], name

    # No output id is seen twice downstream of a read_committed reader.
    for name in STAGES:
        out = pipeline.processors[name].outputs[0]
        ids = [h for m in read_raw(bootstrap, out) for k, h in (m.headers() or []) if k == ID_HEADER]
        assert ids and len(ids) == len(set(ids)), name

    # Stage 1: exactly the Filterer's output on the good records alone.
    good_messages = [m for m in source if (m.partition(), m.offset()) not in bad_offsets]
    assert len(good_messages) == len(good)
    filtered = pipeline.processors["filterer"].outputs[0]
    live = Counter((None if m.key() is None else m.key().decode(), orjson.dumps(orjson.loads(m.value())),
                    m.timestamp()[1]) for m in data_records(read_raw(bootstrap, filtered)))
    expected = filterer_on(pipeline, good_messages)
    assert sum(expected.values()) > RECORDS // 2
    assert live == expected, f"offset holes in {filtered}: {offset_holes(bootstrap, filtered)}"

    # Later stages: each one's output and state is its own code over its actual (committed) input.
    for name in STAGES[1:]:
        spec = pipeline.processors[name]
        plan = plan_for(pipeline, name, bootstrap, EARLIEST, LATEST, chunk_size=700)
        result = run_plan(spark, pipeline, name, plan, OutputTarget(kind="collect"), return_state=spec.stateful)
        backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
        assert backfilled == stream_outputs(bootstrap, spec.outputs[0]), \
            f"{name}; offset holes in {spec.outputs[0]}: {offset_holes(bootstrap, spec.outputs[0])}"
        for p in range(pipeline.topics[spec.inputs[0]].partitions) if spec.stateful else ():
            mine = {k: v for k, v in result.states[(spec.inputs[0], p)].items() if k[:1] in (b"s", b"t")}
            assert mine == stream_kv(pipeline, name, spec.inputs[0], p), (name, p)
