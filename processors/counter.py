"""The paper's Counter Node (Figure 6): counts events per time window and emits the running count.

Each output names the input it came from (`src`), so a test can check the output semantics record by
record, and the state (one count per window, per input partition) can be checked against the truth.
"""

from __future__ import annotations

from stylus import Context, Processor, Record
from stylus.config.durations import parse_duration


class CounterNode(Processor):
    def setup(self, ctx: Context) -> None:
        self.window_ms = int(parse_duration(self.config.get("window", "10s")) * 1000)

    def process(self, record: Record, ctx: Context) -> None:
        window = record.timestamp - record.timestamp % self.window_ms
        key = str(window)
        count = (ctx.state.get(key) or 0) + 1
        ctx.state[key] = count
        ctx.emit(
            {"window": window, "count": count, "src": f"{record.topic}:{record.partition}:{record.offset}"},
            key=key,
        )
