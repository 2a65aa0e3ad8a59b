"""Processors for the table tests: lookup joins whose output a plain-Python join can predict."""

from __future__ import annotations

from typing import Any

from stylus import Context, Processor, Record


class Enricher(Processor):
    """Emits each record's `i` with the row of `config.table` (default `dims`) under its key, and a count per
    key (state: exactly-once state makes the counts exact across crashes)."""

    def process(self, record: Record, ctx: Context) -> None:
        key = str(record.key)
        row: Any = ctx.table(str(self.config.get("table", "dims"))).get(key)
        value: dict[str, Any] = {"i": record.value["i"], "key": key, "row": row}
        if ctx.state is not None:
            count = (ctx.state.get(key) or 0) + 1
            ctx.state[key] = count
            value["count"] = count
        ctx.emit(value, key=key)
