"""Watermarks across stages, without a broker: control records in, the downstream watermark out."""

from __future__ import annotations

import orjson
import yaml

from stylus.config import parse_pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage
from stylus.core.task import NO_TIME
from stylus.eventtime.control import HEADERS, encode
from stylus.eventtime.topology import control_targets, publishes, required_upstreams
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.apps.timed import Alarm

DOC = {
    "pipeline": "cs",
    "topics": {"src": {"partitions": 2}, "mid": {"partitions": 2}, "out": {"partitions": 1},
               "sink": {"partitions": 1}},
    "processors": {
        "up": {"class": "tests.apps.timed:Collect", "inputs": ["src"], "outputs": ["mid"]},
        "p": {"class": "tests.apps.timed:Alarm", "inputs": ["mid"], "outputs": ["out"],
              "semantics": {"state": "exactly_once", "output": "at_least_once"}, "event_time": {"field": "ts"}},
        "tail": {"class": "tests.apps.timed:Collect", "inputs": ["out"], "outputs": ["sink"]},
    },
}


def test_topology_decides_who_publishes() -> None:
    pipeline = parse_pipeline(yaml.safe_dump(DOC))
    assert publishes(pipeline, "up")  # `p` works in event time
    assert not publishes(pipeline, "p")  # `tail` does not, nor anything after it
    assert required_upstreams(pipeline, "mid") == {"up": frozenset({"src:0", "src:1"})}
    assert required_upstreams(pipeline, "src") == {}
    assert control_targets(pipeline, "up") == [("mid", 0), ("mid", 1)]
    assert control_targets(pipeline, "tail") == []  # nobody in the pipeline reads `sink`


def _control(partition: int, offset: int, parts: list[str], wm: int) -> RawMessage:
    return RawMessage("mid", partition, offset, None, encode("up", "x", parts, wm), 0, list(HEADERS))


def test_downstream_watermark_is_the_minimum_over_upstream_partitions() -> None:
    pipeline = parse_pipeline(yaml.safe_dump(DOC))
    sink = CollectingSink(["out"])
    engine = Engine(Alarm(), "p", pipeline.processors["p"], pipeline, sink, RaiseFailures())
    engine.start()
    tasks = {p: PartitionTask("mid", p, PartitionStore(MemoryKV())) for p in (0, 1)}
    data = [RawMessage("mid", 0, 0, b"k", orjson.dumps({"id": "a", "ts": 50_000}), 50_000)]
    assert engine.process_messages(data, lambda t, p: tasks[p]) == 1
    engine.advance_time(tasks.values())
    assert engine.watermark == NO_TIME  # data alone does not move a stage fed by upstream processors
    # instance x covers src:0 only, on both mid partitions; src:1 unreported: still held
    n = engine.process_messages([_control(0, 1, ["src:0"], 60_000), _control(1, 0, ["src:0"], 60_000)],
                                lambda t, p: tasks[p])
    assert n == 0 and engine.control_records == 2  # not counted as input, never handed to the processor
    assert tasks[0].next_offset == 2 and tasks[1].next_offset == 1  # but offsets advance
    engine.advance_time(tasks.values())
    assert engine.watermark == NO_TIME
    # another instance reports src:1 on mid[0] only: mid[1] has not seen it, so it still holds
    engine.process_messages([_control(0, 2, ["src:1"], 52_000)], lambda t, p: tasks[p])
    engine.advance_time(tasks.values())
    assert engine.watermark == NO_TIME
    engine.process_messages([_control(1, 1, ["src:1"], 55_000)], lambda t, p: tasks[p])
    engine.advance_time(tasks.values())
    assert engine.watermark == 52_000  # min over partitions (mid[0] knows src:1 only at 52000)
    assert [o.value["id"] for o in sink.outputs] == ["a"]  # its timer at 51000 fired
    engine.process_messages([_control(0, 3, ["src:1"], 70_000), _control(1, 2, ["src:1"], 70_000)],
                            lambda t, p: tasks[p])
    engine.advance_time(tasks.values())
    assert engine.watermark == 60_000
    # the reports are saved with the state, for a restart that finds an idle upstream
    changes = tasks[0].store.state_changes()  # type: ignore[union-attr]
    meta = {k: orjson.loads(v) for k, v in changes.items() if k.startswith(b"\x00m") and v}
    assert meta[b"\x00mevent_time"]["up"] == {"up": {"src:0": 60_000, "src:1": 70_000}}


class _Producer:
    """Collects what the publisher produces (a control record is produced, never consumed, here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, list[str], int]] = []

    def produce(self, topic: str, value: bytes, key: None, partition: int, headers: object) -> None:
        doc = orjson.loads(value)
        self.sent.append((topic, partition, doc["parts"], doc["wm"]))

    def poll(self, timeout: float) -> int:
        return 0


def test_a_watermark_that_went_back_for_a_joined_partition_is_published_again_as_it_rises() -> None:
    """The upstream held only src[1] and published it far ahead; src[0] joined behind, taking the watermark
    back; as src[0] catches up, each rise is published for both parts, or the downstream would wait on src[0]
    forever at the mark sent when it joined."""
    from stylus.eventtime.control import WatermarkPublisher

    producer = _Producer()
    publisher = WatermarkPublisher(parse_pipeline(yaml.safe_dump(DOC)), "up", "i0", producer, interval=0.0)
    assert publisher.maybe_publish(9_000, [("src", 1)], now=1.0)
    assert publisher.maybe_publish(2_000, [("src", 0), ("src", 1)], now=2.0)  # joined behind: new parts
    assert publisher.maybe_publish(9_000, [("src", 0), ("src", 1)], now=3.0)  # the rise, for both parts
    assert not publisher.maybe_publish(9_000, [("src", 0), ("src", 1)], now=4.0)  # nothing new
    last = [(parts, wm) for _, _, parts, wm in producer.sent[-2:]]
    assert last == [(["src:0", "src:1"], 9_000)] * 2  # one per partition of `mid`
