"""The catch-up replay fires the old owner's timers at the right points (stylus/state/backup/replay.py),
driven here without Kafka: the Engine over RawMessages, a store in memory."""

from __future__ import annotations

from typing import Any

import orjson

from stylus import Processor
from stylus.config import parse_pipeline
from stylus.core.engine import Engine, RaiseFailures
from stylus.core.message import RawMessage
from stylus.core.sink import CollectingSink
from stylus.core.task import PartitionTask
from stylus.runtime.replay import _END, TimerReplay
from stylus.runtime.timeline import FiredTimer
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore

PIPELINE = parse_pipeline("""
pipeline: replay
topics: {in: {partitions: 1}, out: {partitions: 1}}
processors:
  p:
    class: tests.state.test_backup_replay_timers:Logger
    inputs: [in]
    outputs: [out]
    semantics: {state: exactly_once, output: exactly_once}
    event_time: {field: ts, allowed_lateness: 0s}
""")


class Logger(Processor):
    """Logs records and timers in order in its state; a record may set a timer."""

    def process(self, record: Any, ctx: Any) -> None:
        ctx.state["log"] = [*(ctx.state.get("log") or []), f"r{record.offset}"]
        if record.value.get("timer"):
            ctx.set_timer(record.value["timer"][0], record.value["timer"][1])

    def on_timer(self, key: str, timestamp: int, ctx: Any) -> None:
        ctx.state["log"] = [*(ctx.state.get("log") or []), f"t:{key}"]
        ctx.emit({"timer": key}, key=key)


def message(offset: int, timer: tuple[str, int] | None = None) -> RawMessage:
    value = orjson.dumps({"ts": offset * 10, "timer": timer})
    return RawMessage("in", 0, offset, b"k", value, offset * 10, None)


def test_timers_fire_after_their_anchor_once_set_and_once_the_partition_passed_them() -> None:
    spec = PIPELINE.processors["p"]
    sink = CollectingSink(spec.outputs)
    engine = Engine(Logger(config={}, name="p"), "p", spec, PIPELINE, sink, RaiseFailures())
    engine.start()
    store = PartitionStore(MemoryKV())
    store.timers.add("restored", 150)  # in the backup; the old owner fired it after record 11
    store.timers.add("kept", 10_000)  # in the backup; not fired by the old owner
    task = PartitionTask("in", 0, store)
    task.next_offset = 10
    task.sink = sink
    plan = [
        FiredTimer(-1, 50, "old", upper=5),  # fired before the backup (before record 5): never again
        FiredTimer(11, 150, "restored"),
        FiredTimer(-1, 160, "late"),  # set by record 12; no record output says when it fired
    ]
    replay = TimerReplay(task, engine, plan)
    messages = [message(10), message(11), message(12, ("late", 160)), message(13), message(14),
                message(15, ("old", 50)), message(16), message(17)]
    try:
        for msg in messages:
            if replay.anchored_before(msg.offset()):
                replay.fire(msg.offset())
            engine.process_messages([msg], lambda t, p: task)
            replay.fire(msg.offset() + 1)
        replay.fire(_END)
    finally:
        replay.close()
    assert store.state["log"] == ["r10", "r11", "r12", "r13", "r14", "r15", "t:restored", "r16", "t:late", "r17"]
    assert [o.value for o in sink.outputs] == [{"timer": "restored"}, {"timer": "late"}]
    # the timer the old owner fired before the backup, set again by record 15, stays for the live run
    assert sorted(store.timers.pop_due(2**62)) == [(50, "old"), (10_000, "kept")]
    assert replay.max_fired == 160 and replay.fired == 2
    assert store.timers.added is None


def test_a_timer_whose_output_says_where_it_fired_fires_exactly_there_and_later_records_behind_it_are_late() -> None:
    """A timer's output carries its input position (`stylus.at`): the replay fires it between those records even
    where the partition's own event time has not passed it (a stage whose watermark comes from upstream), and
    records after it that are behind it were late for the old owner, so they are dropped here too rather than
    re-creating what the timer closed."""
    spec = PIPELINE.processors["p"]
    sink = CollectingSink(spec.outputs)
    engine = Engine(Logger(config={}, name="p"), "p", spec, PIPELINE, sink, RaiseFailures())
    engine.start()
    store = PartitionStore(MemoryKV())
    store.timers.add("w", 1000)  # in the backup; the old owner fired it after record 11 and before record 12
    task = PartitionTask("in", 0, store)
    task.next_offset = 10
    task.sink = sink

    def at(offset: int, ts: int, timer: tuple[str, int] | None = None) -> RawMessage:
        return RawMessage("in", 0, offset, b"k", orjson.dumps({"ts": ts, "timer": timer}), ts, None)

    replay = TimerReplay(task, engine, [FiredTimer(11, 1000, "w", 12, exact=True)])
    messages = [at(10, 900), at(11, 990), at(12, 995, ("w", 1000)), at(13, 1010)]
    try:
        for msg in messages:
            if replay.anchored_before(msg.offset()):
                replay.fire(msg.offset())
            engine.process_messages([msg], lambda t, p: task)
        replay.fire(_END)
    finally:
        replay.close()
    assert store.state["log"] == ["r10", "r11", "t:w", "r13"]
    assert [o.value for o in sink.outputs] == [{"timer": "w"}]
    assert list(store.timers.pop_due(2**62)) == []  # the late record set no timer to fire a second time
    assert replay.max_fired == 1000
