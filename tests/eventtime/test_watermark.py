"""Per-partition watermark estimates: confidence, allowed lateness, idle partitions, restart floors."""

from __future__ import annotations

import random

from stylus.core.task import NO_TIME, PartitionTask
from stylus.eventtime.clock import clock_of
from stylus.eventtime.tracker import WatermarkTracker
from stylus.state.kv import MemoryKV
from tests.eventtime.engine_setup import Rig, pipeline_doc


def _arrivals(n: int, mean_delay_ms: float, seed: int) -> list[dict[str, int]]:
    """Events every 10 ms of event time, each arriving after an exponential delay: the arrival order is
    the event time plus the delay, so lateness follows a known distribution."""
    rng = random.Random(seed)
    events = [(i * 10 + rng.expovariate(1 / mean_delay_ms), i * 10) for i in range(n)]
    events.sort()
    return [{"id": i, "ts": ts} for i, (_, ts) in enumerate(events)]


def _late_share(confidence: float, allowed: str | None = None, n: int = 30_000) -> tuple[float, Rig]:
    event_time = {"field": "ts", "confidence": confidence, "late": "drop"}
    if allowed:
        event_time["allowed_lateness"] = allowed
    rig = Rig(pipeline_doc("tests.apps.timed:Collect", event_time=event_time))
    records = _arrivals(n, 300.0, seed=11)
    warmup = 2000
    for i in range(0, len(records), 50):  # the worker advances the watermark between small batches
        rig.feed(records[i:i + 50])
        rig.advance()
        if i + 50 == warmup:
            dropped_at_warmup = rig.engine.late.counters.dropped
    late = rig.engine.late.counters.dropped - dropped_at_warmup
    return late / (n - warmup), rig


def test_watermark_meets_its_confidence() -> None:
    share, rig = _late_share(0.99)
    assert 0.0005 < share <= 0.01, share  # behind the watermark: at most 1 %, and the delay is not wasteful
    share90, _ = _late_share(0.90)
    assert 0.03 < share90 <= 0.10, share90
    assert rig.engine.watermark > 29_000 * 10 - 5000  # it follows the data


def test_allowed_lateness_caps_the_learned_delay() -> None:
    share, rig = _late_share(0.999, allowed="100ms")
    # a 100 ms cap is far below the 0.999 quantile of an exponential(300 ms) delay: ~72 % on time
    assert 0.2 < share < 0.35, share
    task = rig.tasks[0]
    assert rig.engine.watermarks.delay(clock_of(task)) == 100


def test_confidence_one_waits_exactly_the_allowed_lateness() -> None:
    share, rig = _late_share(1.0, allowed="5s")
    assert share == 0.0
    assert rig.engine.watermark == rig.tasks[0].max_event_time - 5000


def _task(partition: int, max_time: int = NO_TIME, at_eof: bool = False, quiet_for: float = 0.0,
          now: float = 1000.0) -> PartitionTask:
    task = PartitionTask("in", partition, None)
    task.max_event_time = max_time
    task.at_eof = at_eof
    clock_of(task).last_active = now - quiet_for
    return task


def test_idle_partition_stops_holding_the_watermark_only_at_its_end() -> None:
    from stylus.config.model import EventTimeSpec

    tracker = WatermarkTracker(EventTimeSpec(allowed_lateness=1.0, idle_timeout=5.0))
    busy = _task(0, max_time=50_000)
    # no data yet, not at its end: records may be in flight, it holds everything back
    assert tracker.low_watermark([busy, _task(1, quiet_for=60)], now=1000.0) == NO_TIME
    # at its end, but not yet quiet for idle_timeout: still holds
    assert tracker.low_watermark([busy, _task(1, at_eof=True, quiet_for=2)], now=1000.0) == NO_TIME
    # at its end and quiet long enough: ignored
    assert tracker.low_watermark([busy, _task(1, at_eof=True, quiet_for=6)], now=1000.0) == 49_000
    # a partition with old data, quiet but NOT at its end (consumer still behind): holds at its data
    assert tracker.low_watermark([busy, _task(1, max_time=10_000, quiet_for=60)], now=1000.0) == 9_000
    # every partition idle: the watermark follows the most advanced one
    idle = [_task(0, 50_000, True, 60), _task(1, 10_000, True, 60)]
    assert tracker.low_watermark(idle, now=1000.0) == 49_000


def test_floor_survives_a_restart_and_timers_do_not_fire_twice() -> None:
    doc = pipeline_doc("tests.apps.timed:Alarm", event_time={"field": "ts"})
    kvs: dict[int, MemoryKV] = {}
    rig = Rig(doc, kvs)
    rig.feed([{"id": i, "ts": i * 1000} for i in range(10)])
    fired = rig.advance()
    assert [o.value["id"] for o in fired] == [str(i) for i in range(9)]  # wm 9000 passes timers up to 9000
    rig.checkpoint()
    # restart from the checkpoint: the restored floor keeps the watermark where it was
    again = Rig(doc, kvs)
    task = again.task(0)
    assert clock_of(task).floor == 9000
    late = again.feed([{"id": 99, "ts": 500}])  # behind the floor: late (dropped), not a new timer
    assert late == [] and again.engine.late.counters.dropped == 1
    again.feed([{"id": 10, "ts": 10_000}])
    assert [o.value["id"] for o in again.advance()] == ["9"]


def test_a_partition_that_joins_behind_takes_the_watermark_back_and_keeps_its_records() -> None:
    """An incremental assignment adds a partition whose saved floor is behind the watermark the processor
    reached on the others: its records are judged against its own floor, not dropped as late, and the
    partitions held before keep theirs (their fired timers do not fire again, their late records stay late)."""
    doc = pipeline_doc("tests.apps.timed:Alarm", event_time={"field": "ts", "late": "drop"}, partitions=2)
    kvs: dict[int, MemoryKV] = {}
    behind = Rig(doc, kvs)  # partition 1's previous owner: its floor is saved at 4000
    behind.feed([{"id": f"b{i}", "ts": i * 1000} for i in range(5)], partition=1)
    behind.advance()
    behind.checkpoint()
    rig = Rig(doc, {0: MemoryKV(), 1: kvs[1]})
    rig.feed([{"id": f"a{i}", "ts": i * 1000} for i in range(20)], partition=0)
    rig.advance()
    assert rig.engine.watermark == 19_000
    rig.offsets[1] = 5
    joined = rig.feed([{"id": f"b{i}", "ts": i * 1000} for i in range(5, 10)], partition=1)
    assert joined == [] and rig.engine.late.counters.dropped == 0  # none judged late against partition 0
    assert rig.engine.watermark == 4000
    assert rig.feed([{"id": "a-late", "ts": 10_000}], partition=0) == []
    assert rig.engine.late.counters.dropped == 1  # partition 0 keeps its floor
    fired = [o.value["id"] for o in rig.advance()]
    assert fired == ["b4", "b5", "b6", "b7", "b8"]  # partition 1's own timers, in order; partition 0's not again
