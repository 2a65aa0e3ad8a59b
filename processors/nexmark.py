"""Nexmark q0, q1, q2, q3, q4, q5, q7 and q8 written by hand on the processor API: the baseline a SQL app of the same
query is measured against (`docs/nexmark.md`; `pipelines/nexmark/python.yaml` wires them). Each produces the rows
of `stylus.nexmark.reference`, which the tests check over generated data.

Bids arrive keyed by auction, in event-time order per partition. q5 and q7 find a maximum over every partition,
so each takes two stages: the first, on `stylus.windows`, aggregates per input partition and, when a window
closes, emits one partial result per window (the partition's best, keyed by the window's end, at `end - 1`); the
second merges the partials of a window and emits its rows once the upstream watermark, carried through the topic
between them, says every partition's partial is in (a timer at the window's end).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stylus import Context, Processor, Record
from stylus.config.durations import parse_duration
from stylus.nexmark.reference import (
    AUCTION_SKIP,
    DOLLAR_TO_EURO,
    Q3_CATEGORY,
    Q3_STATES,
    Q4_SIZE_MS,
    Q5_SIZE_MS,
    Q5_SLIDE_MS,
    Q7_SIZE_MS,
    Q8_SIZE_MS,
)
from stylus.windows import Aggregate, Count, Hopping, Mean, Tumbling, WindowedProcessor


def _ms(config: Mapping[str, Any], name: str, default: int) -> int:
    value = config.get(name)
    return default if value is None else round(parse_duration(value) * 1000)


def _window_key(end: int) -> str:
    """State and timer key of a window end: fixed width, so keys sort as the ends do."""
    return f"w{end:016d}"


# ----------------------------------------------------------------------------------- q0, q1, q2
class PassThrough(Processor):
    """q0: `SELECT auction, bidder, price, dateTime, extra FROM bid`."""

    def process(self, record: Record, ctx: Context) -> None:
        b = record.value
        ctx.emit({"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "dateTime": b["dateTime"],
                  "extra": b["extra"]}, key=record.key)


class CurrencyConversion(Processor):
    """q1: q0 with the price in euros (`0.908 * price`; `config.rate` to change it)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.rate = float(self.config.get("rate", DOLLAR_TO_EURO))

    def process(self, record: Record, ctx: Context) -> None:
        b = record.value
        ctx.emit({"auction": b["auction"], "bidder": b["bidder"], "price": self.rate * b["price"],
                  "dateTime": b["dateTime"], "extra": b["extra"]}, key=record.key)


class Selection(Processor):
    """q2: `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0` (`config.skip` for 123)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        super().__init__(config, name)
        self.skip = int(self.config.get("skip", AUCTION_SKIP))

    def process(self, record: Record, ctx: Context) -> None:
        b = record.value
        if b["auction"] % self.skip == 0:
            ctx.emit({"auction": b["auction"], "price": b["price"]}, key=record.key)


# ----------------------------------------------------------------------------------- q5: hot items
class HotItemsCounts(WindowedProcessor):
    """q5, first stage: bids per auction per hopping window (`config.size`, `config.slide`; 10 s every 5 s).
    When a window closes, emits this partition's most-bid auction(s) in it:
    `{window_start, window_end, num, auctions: [...]}`. Every bid of an auction is in one partition (bids are
    keyed by auction), so its count here is its whole count."""

    aggregate = Count()
    key_field = "auction"

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        config = dict(config or {})
        self.window = Hopping(_ms(config, "size", Q5_SIZE_MS), _ms(config, "slide", Q5_SLIDE_MS))
        super().__init__(config, name)
        self._best: list[Any] | None = None  # [num, [auction, ...]] while a window's groups are emitted

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        self._best = [0, []]
        try:
            super().on_timer(key, timestamp, ctx)  # emit_window once per auction of a closing window
            num, auctions = self._best
        finally:
            self._best = None
        if auctions:
            ctx.emit({"window_start": timestamp - self.window.size, "window_end": timestamp,  # type: ignore[union-attr]
                      "num": num, "auctions": sorted(auctions)}, key=str(timestamp), timestamp=timestamp - 1)

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        best = self._best
        if best is None or late:  # corrections of closed windows are not kept (no `retain`)
            return
        if acc > best[0]:
            best[0], best[1] = acc, [int(key)]
        elif acc == best[0]:
            best[1].append(int(key))


class HotItems(Processor):
    """q5, second stage: merges the partitions' partials of each window and, when the window closes, emits
    one row per auction with the most bids: `{auction, num, window_start, window_end}`."""

    def process(self, record: Record, ctx: Context) -> None:
        part = record.value
        key = _window_key(part["window_end"])
        acc = ctx.state.get(key)
        if acc is None:
            ctx.set_timer(key, part["window_end"])
            acc = {"window_start": part["window_start"], "num": part["num"], "auctions": part["auctions"]}
        elif part["num"] > acc["num"]:
            acc = {**acc, "num": part["num"], "auctions": part["auctions"]}
        elif part["num"] == acc["num"]:
            acc = {**acc, "auctions": acc["auctions"] + part["auctions"]}
        else:
            return
        ctx.state[key] = acc

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        acc = ctx.state.get(key)
        if acc is None:
            return
        del ctx.state[key]
        for auction in sorted(acc["auctions"]):
            ctx.emit({"auction": auction, "num": acc["num"], "window_start": acc["window_start"],
                      "window_end": timestamp}, key=str(auction))


# ----------------------------------------------------------------------------------- q7: highest bid
def _q7_row(bid: Mapping[str, Any]) -> dict[str, Any]:
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"], "dateTime": bid["dateTime"],
            "extra": bid["extra"]}


class HighestBids(Aggregate):
    """The bids with the highest price: `[price, [bid, ...]]` (ties all kept), trimmed to q7's fields. Never
    mutates an accumulator (the engine's per-record rollback relies on it)."""

    def zero(self) -> Any:
        return None

    def add(self, acc: Any, bid: Any) -> Any:
        price = bid["price"]
        if acc is None or price > acc[0]:
            return [price, [_q7_row(bid)]]
        if price == acc[0]:
            return [price, [*acc[1], _q7_row(bid)]]
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        if a is None or (b is not None and b[0] > a[0]):
            return b
        if b is None or b[0] < a[0]:
            return a
        return [a[0], a[1] + b[1]]


class HighestBidPartial(WindowedProcessor):
    """q7, first stage: this partition's highest bid(s) per tumbling window (`config.size`, 10 s), emitted when
    the window closes as `{window_start, window_end, price, bids: [...]}`."""

    aggregate = HighestBids()

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        config = dict(config or {})
        self.window = Tumbling(_ms(config, "size", Q7_SIZE_MS))
        super().__init__(config, name)

    def key_of(self, record: Record) -> str:
        return ""  # one group: the whole partition

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        if acc is not None and not late:
            ctx.emit({"window_start": start, "window_end": end, "price": acc[0], "bids": acc[1]}, key=str(end),
                     timestamp=end - 1)


class HighestBid(Processor):
    """q7, second stage: merges the partitions' partials of each window and, when the window closes, emits one
    row per bid with the highest price: `{auction, bidder, price, dateTime, extra, window_start, window_end}`."""

    def process(self, record: Record, ctx: Context) -> None:
        part = record.value
        key = _window_key(part["window_end"])
        acc = ctx.state.get(key)  # [window_start, price, bids]
        if acc is None:
            ctx.set_timer(key, part["window_end"])
            ctx.state[key] = [part["window_start"], part["price"], part["bids"]]
        elif part["price"] > acc[1]:
            ctx.state[key] = [acc[0], part["price"], part["bids"]]
        elif part["price"] == acc[1]:
            ctx.state[key] = [acc[0], acc[1], acc[2] + part["bids"]]

    def on_timer(self, key: str, timestamp: int, ctx: Context) -> None:
        acc = ctx.state.get(key)
        if acc is None:
            return
        del ctx.state[key]
        start, _, bids = acc
        for bid in sorted(bids, key=lambda b: (b["dateTime"], b["auction"], b["bidder"])):
            ctx.emit({**bid, "window_start": start, "window_end": timestamp}, key=str(bid["auction"]))


# ----------------------------------------------------------------------------------- q3: local item suggestion
class LocalItemSuggestion(Processor):
    """q3: each auction of category 10 whose seller, looked up in the table `person` (the persons by id:
    `tables:`), lives in Oregon, Idaho or California: `{name, city, state, id}`."""

    def process(self, record: Record, ctx: Context) -> None:
        a = record.value
        if a["category"] != Q3_CATEGORY:
            return
        p = ctx.table("person").get(a["seller"])
        if p is not None and p["state"] in Q3_STATES:
            ctx.emit({"name": p["name"], "city": p["city"], "state": p["state"], "id": a["id"]}, key=record.key)


# ----------------------------------------------------------------------------------- q4 and q8: window joins
class ByAuction(Processor):
    """q4, first stage: auctions (`{c: category, t: dateTime, x: expires}`) and bids (`{p: price, t: dateTime}`)
    into one topic keyed by the auction, stamped with their time. The window stage after it must see both in
    one input partition (a processor's state is per input partition)."""

    def process(self, record: Record, ctx: Context) -> None:
        v = record.value
        if "seller" in v:
            ctx.emit({"c": v["category"], "t": v["dateTime"], "x": v["expires"]}, key=record.key,
                     timestamp=v["dateTime"])
        else:
            ctx.emit({"p": v["price"], "t": v["dateTime"]}, key=record.key, timestamp=v["dateTime"])


class ClosingPrice(Aggregate):
    """An auction's window: `[category, dateTime, expires, best price or None]` once the auction is in,
    `[None, [[price, dateTime], ...]]` for bids that came before it. Never mutates an accumulator."""

    def zero(self) -> Any:
        return [None, []]

    def add(self, acc: Any, v: Any) -> Any:
        if "c" in v:  # the auction: the bids so far that fall in its time
            best = max((p for p, t in acc[1] if v["t"] <= t <= v["x"]), default=None)
            return [v["c"], v["t"], v["x"], best]
        if acc[0] is None:
            return [None, [*acc[1], [v["p"], v["t"]]]]
        if acc[1] <= v["t"] <= acc[2] and (acc[3] is None or v["p"] > acc[3]):
            return [acc[0], acc[1], acc[2], v["p"]]
        return acc


class ClosingPrices(WindowedProcessor):
    """q4, second stage: per tumbling window (`config.size`, 10 s) and auction, the highest bid between its
    creation and its expiry, emitted when the window closes as `{category, final}` keyed by the category."""

    aggregate = ClosingPrice()

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        self.window = Tumbling(_ms(dict(config or {}), "size", Q4_SIZE_MS))
        super().__init__(config, name)

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        if acc[0] is not None and acc[3] is not None and not late:
            ctx.emit({"category": acc[0], "final": acc[3]}, key=str(acc[0]), timestamp=end - 1)


class AveragePrice(WindowedProcessor):
    """q4, last stage: the closing prices of each window averaged per category: `{category, avg_price,
    window_start, window_end}`."""

    aggregate = Mean("final")

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        self.window = Tumbling(_ms(dict(config or {}), "size", Q4_SIZE_MS))
        super().__init__(config, name)

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        if not late:
            ctx.emit({"category": int(key), "avg_price": Mean().result(acc), "window_start": start,
                      "window_end": end}, key=key, timestamp=end - 1)


class BySeller(Processor):
    """q8, first stage: persons (`{name}`, keyed by id) and auctions (`{}`, keyed by seller) into one topic,
    stamped with their time."""

    def process(self, record: Record, ctx: Context) -> None:
        v = record.value
        if "seller" in v:
            ctx.emit({}, key=str(v["seller"]), timestamp=v["dateTime"])
        else:
            ctx.emit({"name": v["name"]}, key=record.key, timestamp=v["dateTime"])


class NewUser(Aggregate):
    """A person's window: `[name or None, created an auction]`."""

    def zero(self) -> Any:
        return [None, False]

    def add(self, acc: Any, v: Any) -> Any:
        return [v["name"], acc[1]] if "name" in v else [acc[0], True]


class NewUsers(WindowedProcessor):
    """q8, second stage: per tumbling window (`config.size`, 10 s), the persons created in it who created an
    auction in it: `{id, name, window_start, window_end}` when it closes."""

    aggregate = NewUser()

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        self.window = Tumbling(_ms(dict(config or {}), "size", Q8_SIZE_MS))
        super().__init__(config, name)

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        if acc[0] is not None and acc[1] and not late:
            ctx.emit({"id": int(key), "name": acc[0], "window_start": start, "window_end": end}, key=key,
                     timestamp=end - 1)
