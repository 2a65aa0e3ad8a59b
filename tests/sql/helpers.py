"""A SQL app and its pipeline written into a test's directory, the events they read, and plain-Python
references for what the tables must hold."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

#: the input table of most tests; `{events}` is the topic
INPUT = ("CREATE INPUT TABLE events_score(event_time, event, category, score, user_id)\n"
         "  FROM KAFKA('{events}') TIME event_time;\n")


def app_sql(events: str, table: str, query: str, *, application: str | None = None) -> str:
    """An app reading `events_score` from topic `events` into `table` AS `query` (its SELECT and what follows)."""
    head = f"CREATE APPLICATION {application};\n" if application else ""
    return head + INPUT.format(events=events) + f"CREATE TABLE {table} AS\n" + query


BASE = 1_700_000_100_000 - 1_700_000_100_000 % 300_000  # a 5-minute boundary
MINUTE = 60_000
FAR = BASE + 10**9  # a watermark past every window


def write_app(directory: Path, sql: str, *, topics: dict[str, int], processor: dict[str, Any] | None = None,
              name: str = "app", pipeline: str = "sqltest", file: str = "app.sql",
              tables: dict[str, Any] | None = None) -> Path:
    """`directory/app.sql` and `directory/pipeline.yaml` with one `sql:` processor (and `tables:`, for lookup
    joins); returns the YAML's path."""
    (directory / file).write_text(sql)
    settings = {"semantics": {"state": "exactly_once", "output": "at_least_once"},
                "state": {"dir": str(directory / "state")}}
    doc = {"pipeline": pipeline, "topics": {t: {"partitions": n} for t, n in topics.items()},
           "processors": {name: {"sql": file, **settings, **(processor or {})}}}
    if tables:
        doc["tables"] = tables
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def events(n: int = 400, seed: int = 3) -> list[dict[str, Any]]:
    """Rows of `events_score`, in event-time order over ~10 minutes; every 7th has an ISO-8601 time."""
    rng = random.Random(seed)
    names = {"sports": [f"s{i}" for i in range(14)], "music": [f"m{i}" for i in range(6)],
             "tech": [f"t{i}" for i in range(12)]}
    t = BASE
    rows = []
    for i in range(n):
        t += rng.randint(0, 3000)
        category = rng.choice(sorted(names))
        row = {"event_time": iso(t) if i % 7 == 3 else t, "event": rng.choice(names[category]),
               "category": category, "score": round(rng.uniform(0, 10), 2), "user_id": rng.randint(1, 25)}
        rows.append(row)
    return rows


def ms(value: Any) -> int:
    """A time column's value in ms (ISO text with a zone, or ms)."""
    if isinstance(value, int):
        return value
    return round(datetime.fromisoformat(value).timestamp() * 1000)


def tumbling(rows: Iterable[dict[str, Any]], size: int) -> dict[int, list[dict[str, Any]]]:
    """Window start -> its rows, in input order."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        t = ms(row["event_time"])
        out[t - t % size].append(row)
    return out


def hopping(rows: Iterable[dict[str, Any]], size: int, slide: int) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        t = ms(row["event_time"])
        start = t - t % slide - size + slide
        for s in range(start, t + 1, slide):
            if s <= t < s + size:
                out[s].append(row)
    return out


def grouped(rows: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[key(row)].append(row)
    return out


def top_events(rows: list[dict[str, Any]], size: int = 5 * MINUTE, k: int = 10) -> list[dict[str, Any]]:
    """Figure 2 in plain Python: per 5-minute window and category, the k events with the highest score."""
    out = []
    for start, in_window in tumbling(rows, size).items():
        for category, of_category in grouped(in_window, lambda r: r["category"]).items():
            best: dict[str, float] = {}
            for r in of_category:
                best[r["event"]] = max(best.get(r["event"], r["score"]), r["score"])
            ranked = sorted(best.items(), key=lambda e: (-e[1], e[0]))[:k]
            out += [{"category": category, "event": e, "score": s, "window_start": start, "window_end": start + size}
                    for e, s in ranked]
    return out


def canonical(rows: Iterable[Any]) -> list[str]:
    """Rows as sorted JSON text: a multiset comparable with ==."""
    return sorted(json.dumps(r, sort_keys=True) for r in rows)
