"""Nexmark on the real broker: `stylus nexmark` writes the generated events to three topics, and the hand-written
q5 and q7 pipelines read them back and produce the reference rows."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import orjson
import yaml
from confluent_kafka import murmur2

from stylus.kafka.admin import delete_topics
from stylus.kafka.reader import read_topic
from stylus.nexmark import GeneratorConfig, generate, key_of, reference, topics
from stylus.nexmark import bids as bids_of
from stylus.nexmark.kafka import produce
from stylus.runtime.runner import PipelineRunner
from stylus.runtime.worker import Worker
from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus
from tests.support.kafka import read_json
from tests.support.threads import join_runner

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_writes_the_generated_events_keyed_and_timed(bootstrap: str) -> None:
    prefix = f"nexmark-{uuid.uuid4().hex[:8]}"
    names = topics(prefix)
    try:
        done = run_stylus("nexmark", "--events", "5000", "--rate", "100", "--seed", "4", "--bootstrap", bootstrap,
                          "--prefix", prefix, "--partitions", "3")
        assert done.returncode == 0, done.stderr
        assert f"wrote 5,000 events (seed 4) to {bootstrap}" in done.stdout
        assert f"4,600 bids to {names['bid']}" in done.stdout
        assert "5,000/5,000 events (100%)" in done.stderr  # the last progress line
        expected = generate(5000, GeneratorConfig(seed=4, rate=100))
        for kind, topic in names.items():
            records = read_topic(bootstrap, topic)
            wanted = [e for e in expected if e.kind == kind]
            assert len(records) == len(wanted)
            for record in records:
                key = record.key()
                assert key is not None
                assert record.partition() == murmur2(key, 3)  # the Java client's partitioner, as Stylus uses
                value = orjson.loads(record.value() or b"")
                assert record.timestamp()[1] == value["dateTime"]
            # in order within each partition, the same events as generated in-process
            by_partition: dict[int, list[object]] = {}
            for record in records:
                by_partition.setdefault(record.partition(), []).append(orjson.loads(record.value() or b""))
            for partition, values in by_partition.items():
                assert values == [e.value for e in wanted if murmur2(key_of(e).encode(), 3) == partition]
    finally:
        delete_topics(bootstrap, list(names.values()))


def test_q5_and_q7_on_the_broker_equal_the_reference(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    full = yaml.safe_load((ROOT / "pipelines" / "nexmark" / "python.yaml").read_text())
    processors = {}
    for name in ("q5-counts", "q5", "q7-partial", "q7"):
        spec = {k: v for k, v in full["processors"][name].items() if k != "state"}  # state under tmp_path
        if "field" in spec["event_time"]:  # the bid partitions: idle after 1 s once read to their end
            spec["event_time"] = {**spec["event_time"], "idle_timeout": "1s"}
        processors[name] = spec
    used = {t for spec in processors.values() for t in (*spec["inputs"], *spec["outputs"])}
    doc = {"pipeline": "nexmark", "topics": {t: full["topics"][t] for t in used}, "processors": processors}
    _, pipeline = pipeline_factory(doc)
    bid_topic = pipeline.processors["q5-counts"].inputs[0]
    assert pipeline.topics[bid_topic].partitions == 4

    events = generate(20_000, GeneratorConfig(seed=9, rate=200))
    bids = bids_of(events)
    produce(bootstrap, [e for e in events if e.kind == "bid"], names={"bid": bid_topic})
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=2.0)
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
    thread.start()
    join_runner(runner, thread)

    end = bids[-1]["dateTime"]  # every partition idle: the watermark is the newest event time
    for query, name in (("q5", "q5"), ("q7", "q7")):
        rows = read_json(bootstrap, pipeline.processors[name].outputs[0])
        expected = reference.run(query, bids, watermark=end)
        assert len(expected) >= 9
        assert reference.diff(query, rows, expected) == ""
        worker = runner.workers[name]
        assert isinstance(worker, Worker)
        assert worker.event_time.late.total == 0
    assert runner.workers["q5-counts"].processed == len(bids)
