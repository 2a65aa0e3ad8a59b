"""The Nexmark queries q0, q1, q2, q5 and q7 as plain Python over a list of bids, and the joins q3, q4 and q8 over
the persons, auctions and bids: no framework, no Kafka. What every implementation (the hand-written processors, the
SQL apps, a Spark backfill) is compared with; the row shapes are the contract (`docs/nexmark.md`, "Queries and
their rows").

Windows are [window_start, window_end) in ms since the epoch, aligned to the epoch (as `stylus.windows` and
SQL's TUMBLE/HOP align them). A windowed query's rows come out once per window; `watermark` keeps only the
windows a stream has closed by then (window_end <= watermark), since a finite stream never closes its last
windows without a later event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

Row = dict[str, Any]

DOLLAR_TO_EURO = 0.908  # q1
AUCTION_SKIP = 123  # q2: bids of every 123rd auction
Q5_SIZE_MS = 10_000  # q5: hopping windows of 10 s every 5 s (Beam's windowSizeSec, windowPeriodSec)
Q5_SLIDE_MS = 5_000
Q7_SIZE_MS = 10_000  # q7: tumbling windows of 10 s (windowSizeSec)
Q1_PRICE_DECIMALS = 3  # q1's price is compared at the published DECIMAL(23, 3) scale
Q3_CATEGORY = 10  # q3: auctions of category 10 by sellers in Oregon, Idaho or California
Q3_STATES = ("OR", "ID", "CA")
Q4_SIZE_MS = 10_000  # q4 and q8: tumbling windows of 10 s (Beam's windowSizeSec)
Q8_SIZE_MS = 10_000

WINDOWED = frozenset({"q5", "q7"})  # the QUALIFY queries over the bids (two stages each)
JOINS = frozenset({"q3", "q4", "q8"})  # over persons and auctions (and bids: q4)
WINDOWED_JOINS = frozenset({"q4", "q8"})


def q0(bids: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Pass-through: `SELECT auction, bidder, price, dateTime, extra FROM bid`."""
    return [{"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "dateTime": b["dateTime"],
             "extra": b["extra"]} for b in bids]


def q1(bids: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Currency conversion: q0 with `0.908 * price AS price` (dollars to euros; a float)."""
    return [{"auction": b["auction"], "bidder": b["bidder"], "price": DOLLAR_TO_EURO * b["price"],
             "dateTime": b["dateTime"], "extra": b["extra"]} for b in bids]


def q2(bids: Iterable[Mapping[str, Any]], skip: int = AUCTION_SKIP) -> list[Row]:
    """Selection: `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`."""
    return [{"auction": b["auction"], "price": b["price"]} for b in bids if b["auction"] % skip == 0]


def q5(bids: Iterable[Mapping[str, Any]], *, size: int = Q5_SIZE_MS, slide: int = Q5_SLIDE_MS,
       watermark: int | None = None) -> list[Row]:
    """Hot items: per hopping window, the auction(s) with the most bids, `{auction, num, window_start,
    window_end}`; every auction tied for the most gets a row. Sorted by window, then auction."""
    if slide <= 0 or size % slide:
        raise ValueError("q5 needs a window size that is a multiple of the slide")
    counts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # window start -> auction -> n
    for b in bids:
        t = b["dateTime"]
        start = t - t % slide
        while start > t - size:
            counts[start][b["auction"]] += 1
            start -= slide
    rows: list[Row] = []
    for start in sorted(counts):
        if watermark is not None and start + size > watermark:
            continue
        per_auction = counts[start]
        most = max(per_auction.values())
        rows.extend({"auction": auction, "num": most, "window_start": start, "window_end": start + size}
                    for auction in sorted(a for a, n in per_auction.items() if n == most))
    return rows


def q7(bids: Iterable[Mapping[str, Any]], *, size: int = Q7_SIZE_MS, watermark: int | None = None) -> list[Row]:
    """Highest bid: per tumbling window, the bid(s) with the highest price, `{auction, bidder, price, dateTime,
    extra, window_start, window_end}`; every bid tied for the highest gets a row. Sorted by window, then
    dateTime, auction, bidder."""
    best: dict[int, list[Mapping[str, Any]]] = {}
    for b in bids:
        t = b["dateTime"]
        start = t - t % size
        top = best.get(start)
        if top is None or b["price"] > top[0]["price"]:
            best[start] = [b]
        elif b["price"] == top[0]["price"]:
            top.append(b)
    rows: list[Row] = []
    for start in sorted(best):
        if watermark is not None and start + size > watermark:
            continue
        for b in sorted(best[start], key=lambda b: (b["dateTime"], b["auction"], b["bidder"])):
            rows.append({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
                         "dateTime": b["dateTime"], "extra": b["extra"], "window_start": start,
                         "window_end": start + size})
    return rows


def q3(persons: Iterable[Mapping[str, Any]], auctions: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Local item suggestion: `SELECT P.name, P.city, P.state, A.id FROM auction A JOIN person P ON A.seller = P.id
    WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')`, each auction against every person (the table of
    persons whole, as a stream reads it once the persons are loaded), `{name, city, state, id}`. In auction order."""
    by_id = {p["id"]: p for p in persons}
    rows: list[Row] = []
    for a in auctions:
        p = by_id.get(a["seller"])
        if a["category"] == Q3_CATEGORY and p is not None and p["state"] in Q3_STATES:
            rows.append({"name": p["name"], "city": p["city"], "state": p["state"], "id": a["id"]})
    return rows


def q4(auctions: Iterable[Mapping[str, Any]], bids: Iterable[Mapping[str, Any]], *, size: int = Q4_SIZE_MS,
       watermark: int | None = None) -> list[Row]:
    """Average closing price per category, in tumbling windows: per window, each auction created in it closes
    at the highest price of its bids in the same window between its `dateTime` and `expires` (auctions without
    such a bid do not close); the closing prices are averaged per category, `{category, avg_price,
    window_start, window_end}`. Sorted by window, then category."""
    opened: dict[int, dict[int, Mapping[str, Any]]] = defaultdict(dict)  # window start -> auction id -> auction
    for a in auctions:
        t = a["dateTime"]
        opened[t - t % size][a["id"]] = a
    final: dict[tuple[int, int], int] = {}  # (window start, auction) -> highest price
    for b in bids:
        t = b["dateTime"]
        start = t - t % size
        opener = opened.get(start, {}).get(b["auction"])
        if opener is not None and opener["dateTime"] <= t <= opener["expires"]:
            key = (start, b["auction"])
            final[key] = max(final.get(key, b["price"]), b["price"])
    prices: dict[tuple[int, int], list[int]] = defaultdict(list)  # (window start, category) -> closing prices
    for (start, auction), price in final.items():
        prices[(start, opened[start][auction]["category"])].append(price)
    return [{"category": category, "avg_price": sum(p) / len(p), "window_start": start, "window_end": start + size}
            for (start, category), p in sorted(prices.items())
            if watermark is None or start + size <= watermark]


def q8(persons: Iterable[Mapping[str, Any]], auctions: Iterable[Mapping[str, Any]], *, size: int = Q8_SIZE_MS,
       watermark: int | None = None) -> list[Row]:
    """New users: per tumbling window, the persons created in it who also created an auction in it,
    `{id, name, window_start, window_end}` (one row per person and window, as the published query's GROUP BYs
    give). Sorted by window, then id."""
    sellers: set[tuple[int, int]] = set()  # (window start, seller)
    for a in auctions:
        t = a["dateTime"]
        sellers.add((t - t % size, a["seller"]))
    rows: dict[tuple[int, int, str], Row] = {}
    for p in persons:
        t = p["dateTime"]
        start = t - t % size
        if (start, p["id"]) in sellers and (watermark is None or start + size <= watermark):
            rows[(start, p["id"], p["name"])] = {"id": p["id"], "name": p["name"], "window_start": start,
                                                "window_end": start + size}
    return [rows[k] for k in sorted(rows)]


QUERIES: dict[str, Callable[..., list[Row]]] = {"q0": q0, "q1": q1, "q2": q2, "q5": q5, "q7": q7}


def run(query: str, bids: Iterable[Mapping[str, Any]], *, watermark: int | None = None,
        persons: Iterable[Mapping[str, Any]] = (), auctions: Iterable[Mapping[str, Any]] = ()) -> list[Row]:
    """The reference rows of `query` (its published parameters); `watermark` applies to windowed queries; the
    joins read `persons` and `auctions` too."""
    if query == "q3":
        return q3(persons, auctions)
    if query == "q4":
        return q4(auctions, bids, watermark=watermark)
    if query == "q8":
        return q8(persons, auctions, watermark=watermark)
    fn = QUERIES[query]
    return fn(bids, watermark=watermark) if query in WINDOWED else fn(bids)


def split(events: Iterable[Any]) -> dict[str, list[Any]]:
    """Generated events (`stylus.nexmark.Event`) by kind: `{"person": [...], "auction": [...], "bid": [...]}`,
    each in order; `run(query, parts["bid"], persons=parts["person"], auctions=parts["auction"])`."""
    parts: dict[str, list[Any]] = {"person": [], "auction": [], "bid": []}
    for event in events:
        parts[event.kind].append(event.value)
    return parts


def canonical(query: str, rows: Iterable[Mapping[str, Any]]) -> list[bytes]:
    """Rows in a form to compare as multisets: each a JSON object with sorted keys, sorted. Order is not part
    of a query's result (a stream keeps it per partition only); q1's price is rounded to 3 decimals, since
    0.908 * price in binary floating point may differ in its last bits between engines."""
    out = []
    for row in rows:
        if query == "q1":
            row = {**row, "price": round(row["price"], Q1_PRICE_DECIMALS)}
        out.append(orjson.dumps(row, option=orjson.OPT_SORT_KEYS))
    out.sort()
    return out


def diff(query: str, got: Iterable[Mapping[str, Any]], expected: Iterable[Mapping[str, Any]],
         show: int = 3) -> str:
    """'' when `got` equals `expected` as `canonical` compares them; else what is missing and what is extra."""
    a, b = canonical(query, got), canonical(query, expected)
    if a == b:
        return ""
    counts: dict[bytes, int] = defaultdict(int)
    for row in a:
        counts[row] += 1
    for row in b:
        counts[row] -= 1
    extra = [r.decode() for r, n in counts.items() for _ in range(n) if n > 0]
    missing = [r.decode() for r, n in counts.items() for _ in range(-n) if n < 0]
    return (f"{query}: {len(a)} rows against {len(b)} expected; {len(missing)} missing, e.g. {missing[:show]}; "
            f"{len(extra)} extra, e.g. {extra[:show]}")
