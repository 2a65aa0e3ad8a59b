"""JOINs in SQL apps (docs/sql.md, "Joins") on `stylus.testing.TestDriver`: lookup joins against a table of the
pipeline (global and partitioned, INNER and LEFT) and window joins of two streams (tumbling and hopping, INNER and
LEFT), each against a plain-Python join of the same rows; late rows, state that goes with the window, and the
processors a join compiles to."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from stylus.config import load_pipeline
from stylus.testing import TestDriver
from tests.sql.helpers import BASE, MINUTE, canonical, write_app

CLICKS = "CREATE INPUT TABLE clicks(ts, user_id, page) FROM KAFKA('clicks') KEY user_id TIME ts;\n"


# ------------------------------------------------------------------------------------------------ lookup joins
def lookup_app(join: str, condition: str = "") -> str:
    return CLICKS + ("CREATE TABLE out AS\n"
                     "  SELECT c.page, c.user_id, u.country, u.user_id AS uid, c.ts\n"
                     f"  FROM clicks c {join} users u ON c.user_id = u.user_id{condition}\n"
                     "  WHERE c.page <> 'skip';\n")


def lookup_reference(steps: list[tuple[str, Any, Any]], outer: bool, excluded: str | None) -> list[dict[str, Any]]:
    """The join in plain Python: the table as the profile updates before each click left it."""
    table: dict[int, dict[str, Any]] = {}
    rows = []
    for topic, key, value in steps:
        if topic == "profiles":
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
            continue
        if value["page"] == "skip":
            continue
        found = table.get(value["user_id"])
        if found is not None and found["country"] == excluded:
            found = None  # the ON condition on the table's column fails: no match
        if found is None and not outer:
            continue
        rows.append({"page": value["page"], "user_id": value["user_id"],
                     "country": None if found is None else found["country"],
                     "uid": None if found is None else value["user_id"], "ts": value["ts"]})
    return rows


def lookup_steps(seed: int = 5) -> list[tuple[str, Any, Any]]:
    """Profile updates (sets, changes, tombstones) and clicks, interleaved; users 1-12, of which 11 and 12 never
    have a profile."""
    rng = random.Random(seed)
    steps: list[tuple[str, Any, Any]] = []
    t = BASE
    for _ in range(300):
        t += rng.randint(1, 2000)
        user = rng.randint(1, 12)
        if rng.random() < 0.25 and user <= 10:
            value = None if rng.random() < 0.2 else {"user_id": user, "country": rng.choice(["fr", "jp", "XX"])}
            steps.append(("profiles", user, value))
        else:
            steps.append(("clicks", user, {"ts": t, "user_id": user, "page": rng.choice(["a", "b", "skip"])}))
    return steps


@pytest.mark.parametrize("placement", ["global", "partitioned"])
@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN"])
def test_a_lookup_join_reads_the_table_as_applied_before_each_row(join: str, placement: str,
                                                                   tmp_path: Path) -> None:
    """Each click joins the profile as the updates before it left it (a tombstone deletes); `AND u.country <>
    'XX'` in ON makes those rows unmatched (LEFT: NULLs); the key column comes from the record's key when the
    value does not hold it; output rows keep the click's key and timestamp."""
    path = write_app(tmp_path, lookup_app(join, " AND u.country <> 'XX'"),
                     topics={"clicks": 2, "profiles": 2, "out": 1},
                     tables={"users": {"topic": "profiles", "placement": placement, "key": "user_id",
                                       "value": ["country"]}},
                     processor={"semantics": {"output": "at_least_once"}})
    steps = lookup_steps()
    with TestDriver(path) as driver:
        for topic, key, value in steps:
            stamp = value["ts"] if topic == "clicks" else BASE
            driver.send(topic, value, key=str(key), timestamp=stamp)
        out = driver.outputs("out")
    expected = lookup_reference(steps, join == "LEFT JOIN", "XX")
    assert len(expected) > 50 and any(r["country"] is None for r in expected) == (join == "LEFT JOIN")
    assert [r.value for r in out] == expected  # one partition in: in order
    assert [(r.key, r.timestamp) for r in out] == [(str(r["user_id"]), r["ts"]) for r in expected]


def test_a_comma_join_with_the_equality_in_where_is_a_lookup_join(tmp_path: Path) -> None:
    """The published Nexmark form `FROM auction A, person P WHERE A.seller = P.id AND ...`."""
    app = CLICKS + ("CREATE TABLE out AS SELECT c.page, u.country FROM clicks c, users u\n"
                    "  WHERE c.user_id = u.user_id AND u.country = 'fr';\n")
    path = write_app(tmp_path, app, topics={"clicks": 1, "profiles": 1, "out": 1},
                     tables={"users": {"topic": "profiles", "key": "user_id"}},
                     processor={"semantics": {"output": "at_least_once"}})
    with TestDriver(path) as driver:
        driver.send("profiles", {"user_id": 1, "country": "fr"}, key="1")
        driver.send("profiles", {"user_id": 2, "country": "jp"}, key="2")
        for user in (1, 2, 3, 1):
            driver.send("clicks", {"ts": BASE, "user_id": user, "page": f"p{user}"}, key=str(user))
        assert [r.value for r in driver.outputs("out")] == [{"page": "p1", "country": "fr"}] * 2


# ------------------------------------------------------------------------------------------------ window joins
JOIN_INPUTS = ("CREATE INPUT TABLE orders(t, k, g, a) FROM KAFKA('orders') TIME t;\n"
               "CREATE INPUT TABLE payments(t, k, g, b) FROM KAFKA('payments') TIME t;\n")


def window_app(join: str, window: str, on: str = "o.k = p.k") -> str:
    return JOIN_INPUTS + ("CREATE TABLE out AS\n"
                          "  SELECT o.k, o.a, p.b, o.t AS ot, p.t AS pt\n"
                          f"  FROM orders [{window}] o {join} payments [{window}] p ON {on}\n"
                          "  WHERE o.a > 2 AND (p.b IS NULL OR o.a <> p.b);\n")


def rows(seed: int, n: int, value: str) -> list[dict[str, Any]]:
    """`n` rows over ~10 minutes, in time order; keys 0-5 (some NULL), groups 0-1, values 0-9."""
    rng = random.Random(seed)
    t = BASE
    out = []
    for _ in range(n):
        t += rng.randint(0, 6000)
        out.append({"t": t, "k": None if rng.random() < 0.05 else rng.randint(0, 5), "g": rng.randint(0, 1),
                    value: rng.randint(0, 9)})
    return out


def windows_of(t: int, size: int, slide: int) -> list[int]:
    first = t - t % slide + slide  # window ends, as stylus.windows.Hopping gives them
    return [end - size for end in range(first, t + size + 1, slide)]


def window_reference(orders: list[dict[str, Any]], payments: list[dict[str, Any]], outer: bool, size: int,
                     slide: int, keys: tuple[str, ...], watermark: int) -> list[dict[str, Any]]:
    by_window: dict[tuple[int, Any], list[dict[str, Any]]] = defaultdict(list)
    for p in payments:
        for start in windows_of(p["t"], size, slide):
            by_window[(start, tuple(p[k] for k in keys))].append(p)
    out = []
    for o in orders:
        for start in windows_of(o["t"], size, slide):
            if start + size > watermark:
                continue
            key = tuple(o[k] for k in keys)
            matches = [] if None in key else by_window.get((start, key), [])
            bounds = {"window_start": start, "window_end": start + size}
            for p in matches:
                if o["a"] > 2 and o["a"] != p["b"]:
                    out.append({"k": o["k"], "a": o["a"], "b": p["b"], "ot": o["t"], "pt": p["t"], **bounds})
            if outer and not matches and o["a"] > 2:
                out.append({"k": o["k"], "a": o["a"], "b": None, "ot": o["t"], "pt": None, **bounds})
    return out


@pytest.mark.parametrize(("window", "size", "slide"), [("1 minute", MINUTE, MINUTE),
                                                       ("2 minutes ADVANCE BY 1 minute", 2 * MINUTE, MINUTE)],
                         ids=["tumbling", "hopping"])
@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN"])
@pytest.mark.parametrize("keys", [("k",), ("k", "g")], ids=["one-key", "two-keys"])
def test_a_window_join_pairs_the_rows_of_each_window_and_key(join: str, window: str, size: int, slide: int,
                                                              keys: tuple[str, ...], tmp_path: Path) -> None:
    on = " AND ".join(f"o.{k} = p.{k}" for k in keys)
    path = write_app(tmp_path, window_app(join, window, on), topics={"orders": 2, "payments": 3, "out": 1})
    orders, payments = rows(1, 150, "a"), rows(2, 150, "b")
    watermark = BASE + 6 * MINUTE
    with TestDriver(path) as driver:
        for o, p in zip(orders, payments, strict=True):
            driver.send("orders", o, key=str(o["k"]), timestamp=o["t"])
            driver.send("payments", p, key=str(p["g"]), timestamp=p["t"])
        driver.advance_watermark(watermark)
        driver.checkpoint()  # the sides' output is exactly-once (the app's state is): released to the join
        got = [r.value for r in driver.outputs("out")]
        assert driver.late("app")["dropped"] == 0
    expected = window_reference(orders, payments, join == "LEFT JOIN", size, slide, keys, watermark)
    assert len(expected) > 40
    assert canonical(got) == canonical(expected)


def test_window_state_goes_when_the_window_closes_and_late_rows_are_dropped(tmp_path: Path) -> None:
    path = write_app(tmp_path, window_app("JOIN", "1 minute"), topics={"orders": 1, "payments": 1, "out": 1})
    with TestDriver(path) as driver:
        driver.send("orders", {"t": BASE + 10, "k": 1, "g": 0, "a": 5}, key="1", timestamp=BASE + 10)
        driver.send("payments", {"t": BASE + 20, "k": 1, "g": 0, "b": 7}, key="1", timestamp=BASE + 20)
        driver.checkpoint()
        assert any(k.startswith("\x00w") for k in driver.state("app"))  # the window's rows, kept until it closes
        assert driver.outputs("out") == []
        driver.advance_watermark(BASE + MINUTE)
        assert [r.value for r in driver.outputs("out")] == [
            {"k": 1, "a": 5, "b": 7, "ot": BASE + 10, "pt": BASE + 20, "window_start": BASE,
             "window_end": BASE + MINUTE}]
        assert [(r.key, r.timestamp) for r in driver.outputs("out")] == [("1", BASE + MINUTE - 1)]
        assert not any(k.startswith("\x00w") for k in driver.state("app"))  # gone with the window
        driver.send("payments", {"t": BASE + 30, "k": 1, "g": 0, "b": 8}, key="1", timestamp=BASE + 30)
        driver.checkpoint()
        assert driver.late("app") == {"dropped": 1, "redirected": 0, "updated": 0}
        assert len(driver.outputs("out")) == 1


def test_a_join_compiles_to_two_sides_and_a_window_stage(tmp_path: Path) -> None:
    """Conditions on one side are applied by that side's processor, before the join topic; the sides publish
    their inputs' watermarks with their own time columns, the join stage applies `allowed_lateness` once."""
    path = write_app(tmp_path, window_app("JOIN", "1 minute"), topics={"orders": 2, "payments": 3, "out": 1},
                     processor={"event_time": {"allowed_lateness": "5s", "idle_timeout": "2s"}})
    pipeline = load_pipeline(path)
    assert list(pipeline.processors) == ["app.left", "app.right", "app"]
    left, right, join = (pipeline.processors[n] for n in ("app.left", "app.right", "app"))
    topic = "sqltest.app.join"
    assert pipeline.topics[topic].partitions == 3
    assert (left.inputs, right.inputs, left.outputs, right.outputs, join.inputs) == (
        ("orders",), ("payments",), (topic,), (topic,), (topic,))
    assert (left.class_, join.class_) == ("stylus.sql.joinstage:SqlJoinSide", "stylus.sql.joinstage:SqlWindowJoinStage")
    assert left.config["sql"]["plan"]["where"] == ["bin", ">", ["col", "o.a"], ["lit", 2]]
    assert right.config["sql"]["plan"]["where"] is None
    assert join.config["sql"]["plan"]["where"] is not None  # o.a <> p.b needs both sides
    assert left.event_time is not None and right.event_time is not None and join.event_time is not None
    assert (left.event_time.field, left.event_time.allowed_lateness, left.event_time.idle_timeout) == ("t", 0, 2.0)
    assert (join.event_time.field, join.event_time.allowed_lateness) == (None, 5)
    assert "idle_timeout" not in join.event_time.model_fields_set  # its watermark is the sides'
    assert left.semantics.output == "exactly_once" and join.semantics.state == "exactly_once"


def test_the_hopping_bracket_is_hop_in_group_by(tmp_path: Path) -> None:
    head = "CREATE INPUT TABLE e(t, c) FROM KAFKA('events') TIME t;\nCREATE TABLE out AS SELECT c, COUNT(*) AS n "
    bracket = load_pipeline(write_app(tmp_path, head + "FROM e [2 minutes ADVANCE BY 30 seconds];\n",
                                      topics={"events": 1, "out": 1}))
    hop = load_pipeline(write_app(tmp_path, head + "FROM e GROUP BY c, HOP(t, INTERVAL '30' SECOND, "
                                  "INTERVAL '2' MINUTE);\n", topics={"events": 1, "out": 1}))
    assert bracket.processors["app"].config["sql"]["plan"]["window"] == {"type": "hopping", "size": 2 * MINUTE,
                                                                         "slide": 30_000}
    assert bracket.processors["app"].config["sql"]["plan"]["window"] == hop.processors["app"].config["sql"]["plan"][
        "window"]


def grouped_reference(orders: list[dict[str, Any]], payments: list[dict[str, Any]], outer: bool,
                      by: tuple[str, ...], watermark: int) -> list[dict[str, Any]]:
    """`SELECT <by>, COUNT(*) AS n, SUM(p.b) AS total, MAX(p.b) AS top ... GROUP BY <by> HAVING COUNT(*) > 1` over
    the pairs of each 1-minute window (LEFT: an order without a payment counts once, with NULLs)."""
    pairs = defaultdict(list)  # window start -> joined rows
    for o in orders:
        start = o["t"] - o["t"] % MINUTE
        if start + MINUTE > watermark:
            continue
        matches = [p for p in payments if o["k"] is not None and p["k"] == o["k"]
                   and p["t"] - p["t"] % MINUTE == start]
        for p in matches or ([None] if outer else []):
            pairs[start].append({"o.k": o["k"], "p.g": None if p is None else p["g"], "p.b": None if p is None else
                                 p["b"]})
    out = []
    for start, rows in pairs.items():
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            groups[tuple(row[c] for c in by)].append(row)
        for values, members in groups.items():
            bs = [m["p.b"] for m in members if m["p.b"] is not None]
            if len(members) > 1:
                out.append({**{c.split(".")[1]: v for c, v in zip(by, values, strict=True)}, "n": len(members),
                            "total": sum(bs), "top": max(bs) if bs else None, "window_start": start,
                            "window_end": start + MINUTE})
    return out


@pytest.mark.parametrize("by", [("o.k",), ("o.k", "p.g")], ids=["by-left-key", "by-both-sides"])
@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN"])
def test_a_window_join_with_group_by_aggregates_the_pairs_of_each_window(join: str, by: tuple[str, ...],
                                                                         tmp_path: Path) -> None:
    """GROUP BY with the join key: one row per group of pairs when the window closes, HAVING applied, keyed by the
    group; the join stage does it (no further stage)."""
    app = JOIN_INPUTS + (f"CREATE TABLE out AS SELECT {', '.join(by)}, COUNT(*) AS n, SUM(p.b) AS total, "
                         f"MAX(p.b) AS top\n  FROM orders [1 minute] o {join} payments [1 minute] p ON o.k = p.k\n"
                         f"  GROUP BY {', '.join(by)} HAVING COUNT(*) > 1;\n")
    path = write_app(tmp_path, app, topics={"orders": 2, "payments": 2, "out": 1})
    assert list(load_pipeline(path).processors) == ["app.left", "app.right", "app"]
    orders, payments = rows(3, 150, "a"), rows(4, 150, "b")
    watermark = BASE + 6 * MINUTE
    with TestDriver(path) as driver:
        for o, p in zip(orders, payments, strict=True):
            driver.send("orders", o, key=str(o["k"]), timestamp=o["t"])
            driver.send("payments", p, key=str(p["k"]), timestamp=p["t"])
        driver.advance_watermark(watermark)
        driver.checkpoint()
        out = driver.outputs("out")
    expected = grouped_reference(orders, payments, join == "LEFT JOIN", by, watermark)
    assert len(expected) > 10
    assert canonical(r.value for r in out) == canonical(expected)
    for r in out:  # keyed by the group: its value, or the JSON list of its values
        values = [r.value[c.split(".")[1]] for c in by]
        assert r.key == (orjson.dumps(values).decode() if len(by) > 1 else None if values[0] is None
                         else str(values[0]))
