"""Watermarks through the real broker: control records, and a three-stage pipeline whose last stage
closes its windows only after the first stage has passed them, even with partitions carrying no data."""

from __future__ import annotations

import random
import threading
import uuid
from collections import defaultdict
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from stylus.eventtime.control import HEADER, WatermarkPublisher, decode
from stylus.kafka.reader import read_topic
from stylus.runtime.runner import PipelineRunner
from tests.conftest import PipelineFactory
from tests.support.kafka import read_json
from tests.support.threads import join_runner


def _raw(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of `topic`, control records included (the framework's readers skip those)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex[:6]}",
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    while len(eof) < partitions:
        for msg in consumer.consume(500, timeout=1.0):
            if msg.error() is None:
                out.append(msg)
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
    consumer.close()
    return out


def test_control_records_reach_every_partition_and_readers_skip_them(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    _, pipeline = pipeline_factory({
        "topics": {"src": {"partitions": 1}, "mid": {"partitions": 3}, "out": {"partitions": 1}},
        "processors": {
            "up": {"class": "tests.apps.timed:Collect", "inputs": ["src"], "outputs": ["mid"]},
            "down": {"class": "tests.apps.timed:Alarm", "inputs": ["mid"], "outputs": ["out"],
                     "event_time": {"field": "ts"}},
        }})
    from stylus.kafka.admin import create_topics, pipeline_topics

    create_topics(bootstrap, pipeline_topics(pipeline))
    mid = pipeline.processors["down"].inputs[0]
    src = pipeline.processors["up"].inputs[0]
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(mid, orjson.dumps({"id": 1, "ts": 5}), b"k")
    publisher = WatermarkPublisher(pipeline, "up", "i0", producer, interval=0.0)
    assert publisher.maybe_publish(1234, [(src, 0)])
    assert not publisher.maybe_publish(1234, [(src, 0)])  # unchanged: nothing written
    assert producer.flush(10) == 0
    raw = _raw(bootstrap, mid, 3)
    controls = [m for m in raw if any(k == HEADER for k, _ in (m.headers() or []))]
    assert sorted(m.partition() for m in controls) == [0, 1, 2]
    assert [decode(m.value()) for m in controls] == [("up", [f"{src}:0"], 1234)] * 3
    assert [orjson.loads(m.value()) for m in read_topic(bootstrap, mid)] == [{"id": 1, "ts": 5}]


def _produce(bootstrap: str, topic: str, records: list[tuple[int, dict[str, Any]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, value in records:
        producer.produce(topic, orjson.dumps(value), value["category"].encode(), partition=partition,
                         timestamp=value["ts"])
    assert producer.flush(30) == 0


def test_three_stage_pipeline_closes_windows_after_upstream(bootstrap: str, pipeline_factory: PipelineFactory,
                                                            ) -> None:
    doc = {
        "topics": {"events": {"partitions": 3}, "mid": {"partitions": 2}, "counts": {"partitions": 4},
                   "totals": {"partitions": 1}},
        "processors": {
            "relay": {"class": "tests.apps.timed:Collect", "inputs": ["events"], "outputs": ["mid"],
                      "semantics": {"output": "at_least_once"},
                      "event_time": {"allowed_lateness": "2s", "idle_timeout": "1s"}},
            "tens": {"class": "tests.apps.timed:Windowed", "inputs": ["mid"], "outputs": ["counts"],
                     "config": {"window": {"type": "tumbling", "size": "10s"}, "aggregate": {"type": "count"},
                                "key": "category"},
                     "event_time": {"field": "ts"}, "checkpoint": {"interval": "500ms"}},
            "thirties": {"class": "tests.apps.timed:StampedWindows", "inputs": ["counts"], "outputs": ["totals"],
                         "config": {"window": {"type": "tumbling", "size": "30s"},
                                    "aggregate": {"type": "sum", "field": "value"}, "key": "key"},
                         "event_time": {}, "checkpoint": {"interval": "500ms"}},
        },
    }
    _, pipeline = pipeline_factory(doc)
    topics = {spec_name: pipeline.processors[spec_name] for spec_name in pipeline.processors}
    events, mid = topics["relay"].inputs[0], topics["relay"].outputs[0]
    rng = random.Random(9)
    base = 1_700_000_000_000 - 1_700_000_000_000 % 30_000
    records = [{"id": i, "ts": base + i * 60 + rng.randint(0, 59), "category": rng.choice("ab")}
               for i in range(3000)]
    # two of the three input partitions carry data, out of order within 1.5 s; partition 2 stays empty
    shuffled = sorted(records, key=lambda r: r["ts"] + rng.uniform(0, 1500))
    sentinel = {"id": -1, "ts": base + 3_600_000, "category": "z"}
    _produce(bootstrap, events, [(r["id"] % 2, r) for r in shuffled] + [(0, sentinel)])

    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=3.0)
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
    thread.start()
    join_runner(runner, thread)

    totals = [r for r in read_json(bootstrap, topics["thirties"].outputs[0]) if r["key"] != "z"]
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        expected[(r["category"], r["ts"] - r["ts"] % 30_000)] += 1
    assert {(t["key"], t["start"]): t["value"] for t in totals} == dict(expected)
    assert len(totals) == len(expected)
    assert runner.workers["tens"].event_time.late.total == 0
    assert runner.workers["thirties"].event_time.late.total == 0

    # the first stage's watermarks as they went through the bus (CreateTime = when written)
    marks = sorted((m.timestamp()[1], decode(m.value())[2])  # type: ignore[index]
                   for m in _raw(bootstrap, mid, 2) if any(k == HEADER for k, _ in (m.headers() or [])))
    assert marks, "the first stage published no watermark"
    for total in totals:
        passed = [wm for written, wm in marks if written <= total["emitted_at"]]
        assert passed and max(passed) >= total["end"], (total, passed[-3:])
