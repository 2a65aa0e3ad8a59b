"""`SqlRankStage`: the last stage of a QUALIFY table whose input has several partitions.

The window stage ranks each input partition's groups when a window closes and emits that partition's top rows
as one candidates record (`{window_start, window_end, partition, entries}`, at `window_end - 1`) to a
one-partition topic of the app's own. Top rows merge exactly (stylus/sql/ranking.py), so this stage keeps one
merged list per window and PARTITION BY value and emits the window's rows when it closes: when the watermark
the window stage publishes through that topic passes the window's end, every partition's candidates are in
(the watermark of a stage follows what it has emitted: docs/event-time.md). It is the second stage of the
hand-written Nexmark q5 and q7 (processors/nexmark.py: HotItems, HighestBid), on the window machinery: a
tumbling window one upstream slide long holds exactly one upstream window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stylus.api import Context, Record
from stylus.sql.expr import compile_expr
from stylus.sql.ranking import top_for
from stylus.sql.stage import NotARow, group_key, plan_of
from stylus.sql.udfs import load
from stylus.windows.assigners import Tumbling
from stylus.windows.processor import WindowedProcessor


class SqlRankStage(WindowedProcessor):
    """Merges the window stage's candidates and emits each window's rows of rank <= n (docs/sql.md, QUALIFY)."""

    def __init__(self, config: Mapping[str, Any] | None = None, name: str = "") -> None:
        plan = plan_of(config)
        udfs, _ = load(plan.get("functions") or {})
        spec = plan["window"]
        self._size = int(spec["size"])  # the upstream window's: its start is `end - size`
        self.window = Tumbling(int(spec.get("slide") or spec["size"]))
        self.aggregate = top_for(plan["qualify"])
        self._select = [(n, compile_expr(ir, udfs)) for n, ir in plan["select"]]
        self._bounds = tuple(plan.get("bounds") or ())
        super().__init__(config, name)

    def key_of(self, record: Record) -> str:
        value = record.value
        if type(value) is not dict or "entries" not in value:
            raise NotARow(f"{record.topic}[{record.partition}]@{record.offset}: not a candidates record of a "
                          "QUALIFY window stage")
        return str(value.get("partition") or "")

    def value_of(self, record: Record) -> Any:
        return record.value["entries"]

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        if late:
            return  # a window is ranked once (QUALIFY refuses `late: update`)
        start = end - self._size
        select, bounds = self._select, self._bounds
        for _, groups, results in acc:
            r = (groups, results, start, end)
            row = {name: f(r) for name, f in select}
            if "window_start" in bounds:
                row["window_start"] = start
            if "window_end" in bounds:
                row["window_end"] = end
            ctx.emit(row, key=group_key(groups), timestamp=end - 1)
