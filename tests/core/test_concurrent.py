"""Concurrent work inside a partition (stylus/core/concurrent.py), without a broker: the engine is driven by hand
over in-memory messages. The same against the real broker, through the worker: tests/runtime/test_concurrency.py."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from stylus import Processor
from stylus.config import parse_pipeline
from stylus.core.concurrent import ConcurrentEngine
from stylus.core.engine import Engine, StopProcessing
from stylus.core.message import RawMessage
from stylus.core.sink import CollectingSink
from stylus.core.task import PartitionTask
from stylus.testing import TestDriver

YAML = """
pipeline: p
topics: {ev: {partitions: 1}, out: {partitions: 1}}
processors:
  a:
    class: processors.lookup:AsyncLookup
    inputs: [ev]
    outputs: [out]
    config: {latency: 1ms}
    concurrency: 4
"""


class Failures:
    """`on_error` as a list of what it was handed; `stop=True` raises as `on_error: stop` does."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.handed: list[tuple[int, str, str]] = []

    def __call__(self, msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
        if self.stop:
            raise StopProcessing(f"{stage} failed at {msg.offset()}: {exc}", msg.offset())
        self.handed.append((msg.offset(), stage, f"{type(exc).__name__}: {exc}"))


class Rig:
    def __init__(self, processor: Processor, *, limit: int = 4, timeout: float = 5.0, attempts: int = 3,
                 stateful: bool = False, failures: Failures | None = None) -> None:
        pipeline = parse_pipeline(YAML)
        spec = pipeline.processors["a"]
        self.sink = CollectingSink(["out"])
        self.failures = failures or Failures()
        self.engine = Engine(processor, "a", spec, pipeline, self.sink, self.failures)
        self.engine.start()
        self.task = PartitionTask("ev", 0, None)
        self.task.state = {} if stateful else None  # type: ignore[assignment]  # a dict is a mapping enough here
        self.pauses: list[bool] = []
        self.work = ConcurrentEngine(self.engine, limit, timeout, attempts, pause=lambda t: self.pauses.append(True),
                                     resume=lambda t: self.pauses.append(False))
        self.next = 0
        self.handled = 0

    def send(self, *values: Any, key: Callable[[int], str | None] = lambda i: f"k{i}") -> None:
        msgs = []
        for value in values:
            msgs.append(RawMessage("ev", 0, self.next, None if key(self.next) is None else
                                   str(key(self.next)).encode(), orjson.dumps(value), 1_000 + self.next))
            self.next += 1
        self.handled += self.work.admit(msgs, lambda t, p: self.task)

    def run_until(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "timed out"
            self.handled += self.work.run(0.01)

    def spin(self, seconds: float) -> None:
        """Drive the loop for a while (work that must not complete meanwhile)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.handled += self.work.run(0.01)

    @property
    def outputs(self) -> list[Any]:
        return [o.value for o in self.sink.outputs]


class Gated(Processor):
    """Each record waits for its own gate (opened by the test), then emits its id."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[int, asyncio.Event] = {}
        self.running: set[int] = set()
        self.most = 0

    async def process(self, record, ctx):  # type: ignore[no-untyped-def]
        gate = self.gates.setdefault(record.offset, asyncio.Event())
        self.running.add(record.offset)
        self.most = max(self.most, len(self.running))
        try:
            await gate.wait()
        finally:
            self.running.discard(record.offset)
        ctx.emit(record.value["id"], key=record.key)

    def open(self, rig: Rig, offset: int) -> None:
        rig.run_until(lambda: offset in self.gates)
        self.gates[offset].set()


def test_outputs_go_out_as_work_completes_and_the_offset_stays_at_the_oldest_incomplete_record() -> None:
    gated = Gated()
    rig = Rig(gated, limit=4)
    rig.send(*({"id": i} for i in range(4)))
    rig.run_until(lambda: len(gated.running) == 4)
    assert rig.task.checkpoint_offset == 0 and rig.task.next_offset == 4
    for offset in (3, 1, 2):  # completed out of order: each is emitted at once, none moves the offset
        gated.open(rig, offset)
        rig.run_until(lambda o=offset: o in rig.outputs)
        assert rig.task.checkpoint_offset == 0
    gated.open(rig, 0)
    rig.run_until(lambda: len(rig.outputs) == 4)
    assert rig.outputs == [3, 1, 2, 0]
    assert rig.task.checkpoint_offset == 4 and rig.handled == 4 and not rig.work.busy


def test_at_most_the_limit_runs_and_a_full_partition_is_paused_then_resumed() -> None:
    gated = Gated()
    rig = Rig(gated, limit=3)
    rig.send(*({"id": i} for i in range(5)))
    rig.spin(0.05)
    assert len(gated.running) == 3 and rig.pauses == []  # two wait for a slot
    rig.send({"id": 5})  # 6 held: twice the limit, as many as it may hold (the worker stops asking for more)
    assert rig.work.room([rig.task]) == 0 and rig.pauses == []
    rig.send({"id": 6})  # one more came anyway (with other partitions' records): its fetching is paused
    assert rig.pauses == [True]
    for offset in range(7):
        gated.open(rig, offset)
    rig.run_until(lambda: len(rig.outputs) == 7)
    assert gated.most == 3 and rig.pauses == [True, False]
    assert rig.task.checkpoint_offset == 7


def test_records_of_one_key_never_overlap_and_keep_their_order() -> None:
    class Counting(Processor):
        def __init__(self) -> None:
            super().__init__()
            self.busy: set[str] = set()
            self.overlaps = 0

        async def process(self, record, ctx):  # type: ignore[no-untyped-def]
            if record.key in self.busy:
                self.overlaps += 1
            self.busy.add(record.key)
            seen = ctx.state.get(record.key) or 0  # held across an await: safe for the record's own key
            await asyncio.sleep((record.offset * 7) % 5 / 1000)
            ctx.state[record.key] = seen + 1
            self.busy.discard(record.key)
            ctx.emit({"key": record.key, "seen": seen + 1, "offset": record.offset}, key=record.key)

    processor = Counting()
    rig = Rig(processor, limit=8, stateful=True)
    rig.send(*({"i": i} for i in range(60)), key=lambda i: f"k{i % 3}")
    rig.run_until(lambda: len(rig.outputs) == 60)
    assert processor.overlaps == 0
    for key in ("k0", "k1", "k2"):
        mine = [o for o in rig.outputs if o["key"] == key]
        assert [o["seen"] for o in mine] == list(range(1, 21))
        assert [o["offset"] for o in mine] == sorted(o["offset"] for o in mine)
    assert rig.task.state == {"k0": 20, "k1": 20, "k2": 20}


def test_a_record_not_done_in_time_is_tried_again_then_handed_to_on_error() -> None:
    tries: Counter[int] = Counter()

    class Hangs(Processor):
        async def process(self, record, ctx):  # type: ignore[no-untyped-def]
            tries[record.offset] += 1
            if record.value.get("hang"):
                await asyncio.sleep(3600)
            ctx.emit(record.value["id"])

    rig = Rig(Hangs(), limit=4, timeout=0.1, attempts=3)
    rig.send({"id": 0}, {"id": 1, "hang": True}, {"id": 2})
    rig.run_until(lambda: len(rig.outputs) == 2)
    assert rig.task.checkpoint_offset == 1  # the hanging record holds the offset back while it is retried
    rig.run_until(lambda: bool(rig.failures.handed))
    assert rig.failures.handed == [(1, "timeout", "WorkTimeout: work not complete within 0.1s (work_timeout)")]
    assert tries[1] == 3 and rig.work.timeouts == 3 and rig.work.retries == 2
    assert rig.task.checkpoint_offset == 3 and rig.outputs == [0, 2] and rig.handled == 3


def test_a_failing_unit_fails_the_whole_attempt_and_on_error_stop_keeps_the_offset_before_it() -> None:
    class Breaks(Processor):
        async def process(self, record, ctx):  # type: ignore[no-untyped-def]
            ctx.emit("partial")  # never emitted: the attempt fails
            await asyncio.sleep(0)
            if record.value.get("bad"):
                raise ValueError("service said no")
            ctx.emit(record.value["id"])

    rig = Rig(Breaks(), attempts=2)
    rig.send({"id": 0, "bad": True}, {"id": 1})
    rig.run_until(lambda: not rig.work.busy)
    assert rig.failures.handed == [(0, "process", "ValueError: service said no")]
    assert rig.outputs == ["partial", 1]
    assert rig.task.checkpoint_offset == 2

    stopping = Rig(Breaks(), attempts=2, failures=Failures(stop=True))
    stopping.send({"id": 0}, {"id": 1, "bad": True}, {"id": 2})
    with pytest.raises(StopProcessing, match="service said no"):
        stopping.run_until(lambda: False)
    assert stopping.task.checkpoint_offset == 1  # the record that stopped it is never passed


def test_deferred_units_form_a_tree_and_the_record_completes_with_its_last_unit() -> None:
    order: list[str] = []

    class Fans(Processor):
        def process(self, record, ctx):  # type: ignore[no-untyped-def]
            async def call(name: str, delay: float) -> str:
                await asyncio.sleep(delay)
                order.append(name)
                return name

            def then(name: str, c: Any) -> None:
                c.emit(name)
                if name == "b":  # a unit made by a unit: the tree grows while it runs
                    c.defer(call("b.1", 0.03), then=lambda n, c2: c2.emit(n))

            ctx.defer(call("a", 0.02), then=then)
            ctx.defer(call("b", 0.01), then=then)

    rig = Rig(Fans())
    rig.send({"id": 0})
    assert rig.task.checkpoint_offset == 0  # `process` returned; its deferred work has not
    rig.run_until(lambda: not rig.work.busy)
    assert order == ["b", "a", "b.1"]
    assert rig.outputs == ["b", "a", "b.1"]  # in the order emitted, all at once when the tree completes
    assert rig.task.checkpoint_offset == 1


def test_dropped_partitions_cancel_their_work() -> None:
    gated = Gated()
    rig = Rig(gated, limit=2)
    rig.send(*({"id": i} for i in range(4)))
    rig.run_until(lambda: len(gated.running) == 2)
    rig.work.drop([rig.task])
    rig.spin(0.05)
    assert not gated.running and not rig.work.busy and rig.outputs == [] and rig.task.acker is None
    rig.work.close()


@pytest.mark.parametrize("cls", ["AsyncLookup", "DeferredLookup"])
def test_concurrent_outputs_equal_the_synchronous_processors(cls: str) -> None:
    from processors.lookup import AsyncLookup, DeferredLookup

    def run_sync() -> list[str]:
        with TestDriver(parse_pipeline(YAML.replace("AsyncLookup", "Lookup").replace("concurrency: 4", ""))) as d:
            for i in range(200):
                d.send("ev", {"i": i}, key=f"u{i % 13}", timestamp=1_000 + i)
            return sorted(orjson.dumps(r.value, option=orjson.OPT_SORT_KEYS).decode() for r in d.outputs("out"))

    processor = {"AsyncLookup": AsyncLookup, "DeferredLookup": DeferredLookup}[cls](config={"latency": "2ms"})
    rig = Rig(processor, limit=16, stateful=True)
    rig.send(*({"i": i} for i in range(200)), key=lambda i: f"u{i % 13}")
    rig.run_until(lambda: len(rig.outputs) == 200)
    assert sorted(orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode() for v in rig.outputs) == run_sync()
