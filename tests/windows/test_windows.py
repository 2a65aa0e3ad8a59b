"""Windows on the real Engine and state store: out-of-order input shuffled within a bounded delay,
checked against results computed offline."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from stylus.state.kv import MemoryKV
from tests.eventtime.engine_setup import Rig, pipeline_doc

CATS = ["a", "b", "c", "d"]


def _events(n: int, seed: int, *, step: int = 37, max_delay: int = 3_000) -> list[dict[str, Any]]:
    """Events in event-time order, then shuffled so none arrives more than `max_delay` ms late."""
    rng = random.Random(seed)
    events = [{"id": i, "ts": 1_000_000 + i * step, "category": rng.choice(CATS), "amount": rng.randint(1, 50)}
              for i in range(n)]
    order = sorted(events, key=lambda e: e["ts"] + rng.uniform(0, max_delay))
    return order


def _run(rig: Rig, records: list[dict[str, Any]], partitions: int = 1, batch: int = 40) -> list[Any]:
    """Feed in small batches (keyed by category, like a keyed topic), advancing the watermark in between."""
    for i in range(0, len(records), batch):
        chunk = records[i:i + batch]
        for p in range(partitions):
            rig.feed([r for r in chunk if CATS.index(r["category"]) % partitions == p], partition=p)
        rig.advance()
    for p in range(partitions):  # a far-future record on every partition closes all windows
        rig.feed([{"id": -1, "ts": 10**10, "category": "zz", "amount": 0}], partition=p)
    rig.advance()
    return [o.value for o in rig.sink.outputs if o.value["key"] != "zz"]


def _tumbling_reference(records: list[dict[str, Any]], size: int) -> dict[tuple[str, int], int]:
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        sums[(r["category"], r["ts"] - r["ts"] % size)] += r["amount"]
    return dict(sums)


def test_tumbling_sum_out_of_order_matches_reference() -> None:
    records = _events(6000, seed=1)
    rig = Rig(pipeline_doc("tests.apps.timed:CategorySum", event_time={"field": "ts", "allowed_lateness": "3s"},
                           partitions=3), {})
    out = _run(rig, records, partitions=3)
    got = {(o["key"], o["start"]): o["value"] for o in out}
    assert len(got) == len(out)  # one final result per window and key
    assert all(o["final"] and o["end"] - o["start"] == 10_000 for o in out)
    assert got == _tumbling_reference(records, 10_000)
    assert rig.engine.late.counters.total == 0
    # closed windows leave nothing behind (their key ranges were deleted): only the sentinel's open window
    left = [k for t in rig.tasks.values() for k, _ in t.store.state.items()]  # type: ignore[union-attr]
    assert left and all(k.endswith("zz") for k in left)


def test_hopping_count_and_update_mode() -> None:
    records = _events(3000, seed=2)
    config = {"window": {"type": "hopping", "size": "10s", "slide": "5s"}, "aggregate": {"type": "count"},
              "key": "category", "emit": "update"}
    rig = Rig(pipeline_doc("tests.apps.timed:Windowed", event_time={"field": "ts", "allowed_lateness": "3s"},
                           config=config), {})
    out = _run(rig, records)
    finals = {(o["key"], o["start"]): o["value"] for o in out if o["final"]}
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for r in records:
        first = r["ts"] - r["ts"] % 5000
        for start in (first, first - 5000):
            expected[(r["category"], start)] += 1
    assert finals == dict(expected)
    updates = [o for o in out if not o["final"]]
    assert len(updates) == 2 * len(records)  # every record updates both of its windows
    last_update = {}
    for o in updates:
        last_update[(o["key"], o["start"])] = o["value"]
    assert last_update == finals


def test_session_windows_match_reference() -> None:
    rng = random.Random(3)
    records = []
    t = 1_000_000
    for i in range(2000):
        t += rng.choice([100, 200, 300, 2_500])  # gaps of 2.5 s split sessions (gap: 1s)
        records.append({"id": i, "ts": t, "category": rng.choice(CATS[:2]), "amount": 1})
    shuffled = sorted(records, key=lambda r: r["ts"] + rng.uniform(0, 800))
    config = {"window": {"type": "session", "gap": "1s"}, "aggregate": {"type": "sum", "field": "amount"},
              "key": "category"}
    rig = Rig(pipeline_doc("tests.apps.timed:Windowed", event_time={"field": "ts", "allowed_lateness": "1s"},
                           config=config), {})
    out = _run(rig, shuffled)
    expected = []
    for cat in CATS[:2]:
        times = sorted(r["ts"] for r in records if r["category"] == cat)
        start, last, n = times[0], times[0], 1
        for ts in times[1:]:
            if ts < last + 1000:
                last, n = ts, n + 1
            else:
                expected.append((cat, start, last + 1000, n))
                start, last, n = ts, ts, 1
        expected.append((cat, start, last + 1000, n))
    assert sorted((o["key"], o["start"], o["end"], o["value"]) for o in out) == sorted(expected)


def test_top_k_mean_min_max_from_yaml() -> None:
    records = _events(2000, seed=4, max_delay=0)
    results = {}
    for agg in ({"type": "top_k", "k": 3, "by": "amount", "item": "id"}, {"type": "mean", "field": "amount"},
                {"type": "min", "field": "amount"}, {"type": "max", "field": "amount"}):
        config = {"window": {"type": "tumbling", "size": "30s"}, "aggregate": agg, "key": "category"}
        rig = Rig(pipeline_doc("tests.apps.timed:Windowed", event_time={"field": "ts"}, config=config), {})
        results[agg["type"]] = {(o["key"], o["start"]): o["value"] for o in _run(rig, records)}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["category"], r["ts"] - r["ts"] % 30_000)].append(r)
    for group, rs in groups.items():
        amounts = [r["amount"] for r in rs]
        assert results["mean"][group] == sum(amounts) / len(amounts)
        assert results["min"][group] == min(amounts)
        assert results["max"][group] == max(amounts)
        top = sorted(rs, key=lambda r: (-r["amount"], str(r["id"])))[:3]
        assert results["top_k"][group] == [{"id": r["id"], "amount": r["amount"]} for r in top]


def test_restart_in_the_middle_of_open_windows_emits_each_final_once() -> None:
    """Exactly-once state: crash (lose everything after the checkpoint), replay from the saved offset."""
    records = _events(4000, seed=5)
    doc = pipeline_doc("tests.apps.timed:CategorySum", event_time={"field": "ts", "allowed_lateness": "3s"})
    kvs: dict[int, MemoryKV] = {}
    rig = Rig(doc, kvs)
    delivered: list[Any] = []  # what reached Kafka: outputs up to the last checkpoint (EO output)
    for i in range(0, 2400, 40):
        rig.feed(records[i:i + 40])
        rig.advance()
        if i == 1600:
            rig.checkpoint()
            delivered = [o.value for o in rig.sink.outputs]
    # crash: a new instance reopens the saved state and replays from its offset
    again = Rig(doc, kvs)
    start = again.task(0).next_offset
    assert start == 1640
    out = _run(again, records[start:])
    finals = delivered + out
    got = [(o["key"], o["start"], o["value"]) for o in finals if o["key"] != "zz"]
    assert len(got) == len({(k, s) for k, s, _ in got})
    assert {(k, s): v for k, s, v in got} == _tumbling_reference(records, 10_000)


def test_windows_closing_while_a_checkpoint_is_in_flight_are_all_emitted() -> None:
    """Overlapped checkpoints: each snapshot's write lands only after the next batch and its timers (as
    on the checkpoint thread, or after an exactly-once commit). Every window still comes out, right."""
    records = _events(4000, seed=3)
    rig = Rig(pipeline_doc("tests.apps.timed:CategorySum", event_time={"field": "ts", "allowed_lateness": "3s"},
                           partitions=2), {})
    in_flight: list[Any] = []
    for i in range(0, len(records), 300):  # ~11 s of event time: windows open and close a batch apart
        chunk = records[i:i + 300]
        for p in range(2):
            rig.feed([r for r in chunk if CATS.index(r["category"]) % 2 == p], partition=p)
        rig.advance()  # windows close while the previous snapshot is still being written
        for write in in_flight:
            write()
        for task in rig.tasks.values():
            task.state.evict()  # type: ignore[union-attr]
        in_flight = [t.store.prepare_save(t.next_offset) for t in rig.tasks.values()]  # type: ignore[union-attr]
    for p in range(2):
        rig.feed([{"id": -1, "ts": 10**10, "category": "zz", "amount": 0}], partition=p)
    rig.advance()
    got = {(o.value["key"], o.value["start"]): o.value["value"] for o in rig.sink.outputs if o.value["key"] != "zz"}
    assert got == _tumbling_reference(records, 10_000)
