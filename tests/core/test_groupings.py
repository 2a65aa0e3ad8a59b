"""stylus/core/groupings.py and the engine's use of it, with no broker: the partitions each emit gets, on a
plain sink (per-call `partition=`), for timers, and the errors that fail a record."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RawMessage
from stylus.core.groupings import Routes
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.apps.grouping import TimedRouter

DOC = """
pipeline: grp
topics: {in: {partitions: 1}, fan: {partitions: 4}, words: {partitions: 3}, one: {partitions: 2}}
processors:
  p:
    class: tests.apps.grouping:TimedRouter
    inputs: [in]
    outputs: [{topic: fan, grouping: all}, words, {topic: one, grouping: global}]
    semantics: {state: exactly_once, output: at_least_once}
"""


def pipeline() -> Pipeline:
    return parse_pipeline(DOC)


def test_routes_give_partitions_only_where_something_chose_them() -> None:
    routes = Routes(pipeline(), pipeline().processors["p"])
    assert routes and "fan" in routes and "words" not in routes
    assert routes.partitions("fan", None) == (0, 1, 2, 3)
    assert routes.partitions("one", None) == (0,)
    assert routes.partitions("words", None) is None  # the producer's choice: by key, or spread
    assert routes.each("words") == (-1,) and routes.each("one") == (0,) and routes.each("fan", 3) == (3,)
    assert routes.partitions("words", 2) == (2,)
    assert routes.partitions("fan", 1) == (1,)  # direct wins over the output's grouping
    with pytest.raises(ValueError, match=r"`words`, which has 3 partitions \(0-2\)"):
        routes.partitions("words", 3)
    with pytest.raises(ValueError, match="which has 2 partitions"):
        routes.partitions("one", -1)
    with pytest.raises(TypeError, match="must be an int"):
        routes.partitions("one", True)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
        self.calls.append((stage, str(exc)))


def test_the_engine_routes_records_and_timers_and_fails_impossible_partitions() -> None:
    pipe = pipeline()
    sink = CollectingSink(pipe.processors["p"].outputs)
    failures = Recorder()
    engine = Engine(TimedRouter(), "p", pipe.processors["p"], pipe, sink, failures)
    engine.start()
    task = PartitionTask("in", 0, PartitionStore(MemoryKV()))
    values = [{"id": 0}, {"id": 1, "topic": "words"}, {"id": 2, "topic": "one"},
              {"id": 3, "topic": "words", "partition": 1}, {"id": 4, "topic": "words", "partition": 9}]
    msgs = [RawMessage("in", 0, i, b"k", orjson.dumps(v), 1000 + i) for i, v in enumerate(values)]
    engine.process_messages(msgs, lambda t, p: task)
    got = [(o.topic, o.partition, o.value["id"]) for o in sink.outputs]
    assert got == [("fan", 0, 0), ("fan", 1, 0), ("fan", 2, 0), ("fan", 3, 0), ("words", -1, 1), ("one", 0, 2),
                   ("words", 1, 3)]
    assert failures.calls == [("process", "emit(partition=9) to `words`, which has 3 partitions (0-2): emit to "
                                          "an existing partition, or add partitions to the topic")]
    sink.outputs.clear()
    engine.fire_timers([task], 1001)  # the timers of ids 0 and 1: to the default output, `all`
    assert [(o.topic, o.partition) for o in sink.outputs] == [("fan", p) for p in range(4)] * 2
