"""`allowed_lateness` on a stage fed by another processor: its watermark is the upstream's minus its own
grace, so its windows wait for records the upstream passed on behind its own watermark."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import orjson
import yaml
from confluent_kafka import Producer

from stylus.api import import_processor_class
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage
from stylus.eventtime.control import HEADERS, encode
from stylus.runtime.runner import PipelineRunner
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.conftest import PipelineFactory
from tests.support.kafka import read_json
from tests.support.threads import join_runner

WINDOW = {"window": {"type": "tumbling", "size": "10s"}, "aggregate": {"type": "count"}, "key": "category"}


def _two_stages(lateness: str | None) -> Pipeline:
    event_time: dict[str, Any] = {"field": "ts"}
    if lateness is not None:
        event_time["allowed_lateness"] = lateness
    doc = {"pipeline": "st", "topics": {"src": {"partitions": 1}, "mid": {"partitions": 1}, "out": {"partitions": 1}},
           "processors": {
               "up": {"class": "tests.apps.timed:Collect", "inputs": ["src"], "outputs": ["mid"],
                      "semantics": {"output": "at_least_once"}},
               "win": {"class": "tests.apps.timed:Windowed", "inputs": ["mid"], "outputs": ["out"], "config": WINDOW,
                       "semantics": {"state": "exactly_once", "output": "at_least_once"}, "event_time": event_time}}}
    return parse_pipeline(yaml.safe_dump(doc))


class Stage:
    """The downstream stage on a real Engine, fed data and the upstream's control records by hand."""

    def __init__(self, pipeline: Pipeline) -> None:
        spec = pipeline.processors["win"]
        self.sink = CollectingSink(["out", "st.win.late"])
        processor = import_processor_class(spec.class_)(config=spec.config, name="win")
        self.engine = Engine(processor, "win", spec, pipeline, self.sink, RaiseFailures())
        self.engine.start()
        self.task = PartitionTask("mid", 0, PartitionStore(MemoryKV()))
        self.offset = 0

    def _feed(self, msgs: list[RawMessage]) -> list[Any]:
        before = len(self.sink.outputs)
        self.engine.process_messages(msgs, lambda t, p: self.task)
        self.engine.advance_time([self.task])
        return [o.value for o in self.sink.outputs[before:]]

    def _next(self) -> int:
        self.offset += 1
        return self.offset - 1

    def record(self, ts: int, category: str = "a") -> list[Any]:
        value = orjson.dumps({"ts": ts, "category": category})
        return self._feed([RawMessage("mid", 0, self._next(), category.encode(), value, ts)])

    def upstream_mark(self, watermark: int) -> list[Any]:
        control = encode("up", "i0", ["src:0"], watermark)
        return self._feed([RawMessage("mid", 0, self._next(), None, control, 0, list(HEADERS))])


def test_a_downstream_stage_waits_its_own_allowed_lateness_behind_the_upstream() -> None:
    stage = Stage(_two_stages("3s"))
    stage.record(1_000)
    assert stage.upstream_mark(10_500) == []  # the window [0, 10 s) is still open: 10.5 s - 3 s < 10 s
    assert stage.engine.watermark == 7_500
    assert stage.record(9_000) == []  # behind the upstream's mark, within this stage's grace: counted
    assert stage.engine.late.counters.total == 0
    closed = stage.upstream_mark(13_000)
    assert [(v["start"], v["value"]) for v in closed] == [(0, 2)]
    assert stage.engine.watermark == 10_000


def test_without_allowed_lateness_the_stage_follows_the_upstream_exactly() -> None:
    stage = Stage(_two_stages(None))
    stage.record(1_000)
    assert [(v["start"], v["value"]) for v in stage.upstream_mark(10_500)] == [(0, 1)]
    assert stage.engine.watermark == 10_500
    stage.record(9_000)  # behind the watermark with no grace: late, dropped
    assert stage.engine.late.counters.dropped == 1


def _produce(bootstrap: str, topic: str, records: list[tuple[int, dict[str, Any]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, value in records:
        producer.produce(topic, orjson.dumps(value), str(value["id"]).encode(), partition=partition,
                         timestamp=value["ts"])
    assert producer.flush(30) == 0


def _wait_until(check: Callable[[], bool], runner: PipelineRunner, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert not runner.errors, runner.errors
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        threading.Event().wait(0.05)


def test_a_window_stage_behind_a_rekeying_stage_closes_no_window_before_its_grace(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    """The re-keying stage has no event_time of its own: its watermark is the newest timestamp it read, and
    it passes on records up to 1.5 s behind it. The window stage's 2 s grace must absorb all of them."""
    doc = {
        "topics": {"events": {"partitions": 1}, "bycat": {"partitions": 2}, "counts": {"partitions": 1}},
        "processors": {
            "rekey": {"class": "tests.apps.timed:Rekey", "inputs": ["events"], "outputs": ["bycat"],
                      "config": {"work_ms": 1}, "batch_size": 20, "semantics": {"output": "at_least_once"}},
            "win": {"class": "tests.apps.timed:Windowed", "inputs": ["bycat"], "outputs": ["counts"],
                    "config": {**WINDOW, "window": {"type": "tumbling", "size": "2s"}},
                    "checkpoint": {"interval": "500ms"},
                    "event_time": {"field": "ts", "allowed_lateness": "2s"}},
        },
    }
    _, pipeline = pipeline_factory(doc)
    events, counts = pipeline.processors["rekey"].inputs[0], pipeline.processors["win"].outputs[0]
    rng = random.Random(3)
    base = 1_700_000_000_000 - 1_700_000_000_000 % 10_000
    records = [{"id": i, "ts": base + i * 20 + rng.randint(0, 19), "category": rng.choice("abc")}
               for i in range(3000)]
    shuffled = sorted(records, key=lambda r: r["ts"] + rng.uniform(0, 1500))  # up to 1.5 s out of order
    sentinel = {"id": -1, "ts": base + 3_600_000, "category": "z"}  # closes every window of the test

    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=3.0)
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
    thread.start()
    # both stages hold their partitions before input arrives: the window stage then reads the re-keyed
    # records as they are written, so the upstream's watermarks reach it ahead of records behind them
    _wait_until(lambda: [len(w.tasks) for w in list(runner.workers.values())] == [1, 2], runner,
                "both stages assigned")
    _produce(bootstrap, events, [(0, r) for r in shuffled] + [(0, sentinel)])
    join_runner(runner, thread)

    expected: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        expected[(r["category"], r["ts"] - r["ts"] % 2_000)] += 1
    results = [r for r in read_json(bootstrap, counts) if r["key"] != "z"]
    assert runner.workers["win"].event_time.late.total == 0
    assert {(r["key"], r["start"]): r["value"] for r in results} == dict(expected)
    assert len(results) == len(expected)  # each window once: none closed early and emitted again
