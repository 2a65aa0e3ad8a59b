"""A processor whose "fixed" version counts differently, for rollback tests."""

from __future__ import annotations

from typing import Any

from stylus import Processor


class DoubleCount(Processor):
    """WordCount that adds 2 per record: the state shows which records it processed."""

    def process(self, record: Any, ctx: Any) -> None:
        ctx.state[record.key] = (ctx.state.get(record.key) or 0) + 2
