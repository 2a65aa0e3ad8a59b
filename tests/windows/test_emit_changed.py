"""`emit: changed`, the `changed` and `emit_window` hooks and `window_value` of WindowedProcessor, on the
real Engine and state store, checked against results computed offline in arrival order."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from stylus.api import Context, Record
from stylus.windows import Count, Sum, TopK, Tumbling, WindowedProcessor
from tests.eventtime.engine_setup import Rig, pipeline_doc

CATS = ["a", "b", "c"]
SIZE = 10_000


class Leaders(WindowedProcessor):
    """Top 2 ids by amount per category; re-published only when the order of the ids moves."""

    window = Tumbling(60_000)  # the YAML below overrides only the window
    aggregate = TopK(2, by="amount", item="id")
    key_field = "category"
    emit_changes = True

    def changed(self, before: Any, after: Any) -> bool:
        return [e["id"] for e in before or ()] != [e["id"] for e in after]


class ClosedCounts(WindowedProcessor):
    """Closed windows are not emitted but remembered per key (`emit_window`); each record emits the count
    of its open window so far (`window_value`) and how many windows of its key have closed."""

    window = Tumbling(SIZE)
    aggregate = Count()
    key_field = "category"

    def process(self, record: Record, ctx: Context) -> None:
        super().process(record, ctx)
        t: int = ctx.event_time  # type: ignore[attr-defined]
        key = self.key_of(record)
        end = t - t % SIZE + SIZE
        ctx.emit({"key": key, "open": self.window_value(ctx, key, end), "closed": ctx.state.get(key, 0)})

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        ctx.state[key] = ctx.state.get(key, 0) + 1


def _events(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events = [{"id": i % 30, "ts": 1_000_000 + i * 41, "category": rng.choice(CATS), "amount": rng.randint(1, 40)}
              for i in range(n)]  # ids recur: an id that improves its own score at its rank changes no order
    return sorted(events, key=lambda e: e["ts"] + rng.uniform(0, 2_000))  # at most 2 s out of order


def _run(rig: Rig, records: list[dict[str, Any]]) -> list[Any]:
    for i in range(0, len(records), 50):
        rig.feed(records[i:i + 50])
        rig.advance()
    rig.feed([{"id": -1, "ts": 10**10, "category": "zz", "amount": 0}])
    rig.advance()
    return [o.value for o in rig.sink.outputs if o.value["key"] != "zz"]


def _top2(best: dict[int, int]) -> list[dict[str, int]]:
    ranked = sorted(best.items(), key=lambda item: (-item[1], str(item[0])))[:2]
    return [{"id": i, "amount": a} for i, a in ranked]


def _reference(records: list[dict[str, Any]], same: Any) -> tuple[list[Any], dict[Any, Any]]:
    """Updates (in arrival order) and final results of a 10 s top-2 per category."""
    best: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
    updates = []
    for r in records:
        group = (r["category"], r["ts"] - r["ts"] % SIZE)
        before = _top2(best[group]) if best[group] else None
        if r["amount"] > best[group].get(r["id"], -1):
            best[group][r["id"]] = r["amount"]
        after = _top2(best[group])
        if not same(before, after):
            updates.append((*group, after))
    return updates, {group: _top2(b) for group, b in best.items()}


def test_emit_changed_from_yaml_emits_exactly_the_changes() -> None:
    records = _events(3000, seed=7)
    config = {"window": {"type": "tumbling", "size": "10s"}, "aggregate": {"type": "top_k", "k": 2, "by": "amount",
              "item": "id"}, "key": "category", "emit": "changed"}
    rig = Rig(pipeline_doc("tests.apps.timed:Windowed", event_time={"field": "ts", "allowed_lateness": "2s"},
                           config=config), {})
    out = _run(rig, records)
    updates, finals = _reference(records, lambda a, b: a == b)
    assert [(o["key"], o["start"], o["value"]) for o in out if not o["final"]] == updates
    assert {(o["key"], o["start"]): o["value"] for o in out if o["final"]} == finals
    assert len(updates) < len(records)  # the point: records that change nothing are not re-published


def test_a_changed_hook_decides_and_yaml_overrides_only_what_it_names() -> None:
    records = _events(3000, seed=8)
    rig = Rig(pipeline_doc("tests.windows.test_emit_changed:Leaders",
                           event_time={"field": "ts", "allowed_lateness": "2s"},
                           config={"window": {"type": "tumbling", "size": "10s"}}), {})
    out = _run(rig, records)
    ids = [(o["key"], o["start"], [e["id"] for e in o["value"]]) for o in out if not o["final"]]
    updates, finals = _reference(
        records, lambda a, b: a is not None and [e["id"] for e in a] == [e["id"] for e in b])
    assert ids == [(k, s, [e["id"] for e in v]) for k, s, v in updates]
    assert all(o["end"] - o["start"] == SIZE for o in out)  # the YAML window, the class's aggregate and key
    assert {(o["key"], o["start"]): o["value"] for o in out if o["final"]} == finals
    # fewer than with the default hook (which also counts a better score at the same rank as a change)
    assert len(ids) < len(_reference(records, lambda a, b: a == b)[0])


def test_emit_changed_on_sessions() -> None:
    config = {"window": {"type": "session", "gap": "1s"}, "aggregate": {"type": "sum", "field": "amount"},
              "key": "category", "emit": "changed"}
    rig = Rig(pipeline_doc("tests.apps.timed:Windowed", event_time={"field": "ts"}, config=config), {})
    feed = [(0, 5), (100, 0), (200, 1), (5_000, 2), (2_000, 0), (1_100, 0)]
    out = rig.feed([{"id": i, "ts": 1_000_000 + t, "category": "a", "amount": a} for i, (t, a) in enumerate(feed)])
    assert [(o.value["start"] - 1_000_000, o.value["value"], o.value["final"]) for o in out] == [
        (0, 5, False),  # a new session
        (0, 6, False),  # 100 ms, amount 0: the same sum, nothing; 200 ms: 6
        (5_000, 2, False),  # a second session
        (2_000, 0, False),  # a third one, between them
        (0, 6, False),  # 1.1 s bridges the first and the third: a merged session always counts as changed
    ]


def test_emit_window_and_window_value_let_a_subclass_keep_results_to_itself() -> None:
    records = _events(1000, seed=9)
    rig = Rig(pipeline_doc("tests.windows.test_emit_changed:ClosedCounts",
                           event_time={"field": "ts", "allowed_lateness": "2s"}), {})
    out = _run(rig, records)
    assert len(out) == len(records)  # one per record, no window result
    open_count: dict[tuple[str, int], int] = defaultdict(int)
    for r, o in zip(records, out, strict=True):
        open_count[(r["category"], r["ts"] - r["ts"] % SIZE)] += 1
        assert o["open"] == open_count[(r["category"], r["ts"] - r["ts"] % SIZE)]
    state = rig.tasks[0].store.state  # type: ignore[union-attr]
    assert {c: state.get(c) for c in CATS} == {c: len({s for k, s in open_count if k == c}) for c in CATS}


def test_sum_keeps_its_fast_path_and_update_mode_unchanged() -> None:
    """`emit: update` still emits on every record, changed or not (a zero amount changes no sum)."""
    config = {"window": {"type": "tumbling", "size": "10s"}, "aggregate": {"type": "sum", "field": "amount"},
              "key": "category", "emit": "update"}
    rig = Rig(pipeline_doc("tests.apps.timed:Windowed", event_time={"field": "ts"}, config=config), {})
    assert rig.processor.process == rig.processor._process_tumbling  # type: ignore[attr-defined]
    out = rig.feed([{"ts": 1_000_000 + i, "category": "a", "amount": i % 2} for i in range(6)])
    assert [o.value["value"] for o in out] == [0, 1, 1, 2, 2, 3]
    assert Sum("amount").add(3, None) == 3
