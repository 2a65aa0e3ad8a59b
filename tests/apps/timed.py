"""Event-time processors used by the event-time and window tests."""

from __future__ import annotations

from typing import Any

from stylus import Processor
from stylus.windows import Count, Sum, Tumbling, WindowedProcessor


class Collect(Processor):
    """Emits every record it is handed (so a test sees which records reached user code)."""

    def process(self, record: Any, ctx: Any) -> None:
        ctx.emit(record.value, key=record.key)


class Rekey(Processor):
    """Re-keys each record by its `category`, with no event time of its own (a resharding stage).
    `work_ms` per record stands for real work: the stage's watermark then moves while records are in flight."""

    def process(self, record: Any, ctx: Any) -> None:
        work = self.config.get("work_ms")
        if work:
            import time

            time.sleep(work / 1000)
        ctx.emit(record.value, key=record.value["category"])


class Alarm(Processor):
    """Sets a timer at `ts` + 1000 for each record and emits it when the watermark passes."""

    def process(self, record: Any, ctx: Any) -> None:
        ctx.set_timer(str(record.value["id"]), record.value["ts"] + 1000)

    def on_timer(self, key: str, timestamp: int, ctx: Any) -> None:
        ctx.emit({"id": key, "at": timestamp, "wm": ctx.watermark}, key=key)


class EchoAlarm(Alarm):
    """Alarm that also emits each record as it is processed: outputs of records and of timers."""

    def process(self, record: Any, ctx: Any) -> None:
        super().process(record, ctx)
        ctx.emit({"id": str(record.value["id"]), "echo": True}, key=record.key)


class CategorySum(WindowedProcessor):
    """Window and aggregate set in code: 10 s tumbling sum of `amount` per `category`."""

    window = Tumbling(10_000)
    aggregate = Sum("amount")
    key_field = "category"


class CategoryCount(WindowedProcessor):
    window = Tumbling(10_000)
    aggregate = Count()
    key_field = "category"


class Windowed(WindowedProcessor):
    """Everything from YAML `config`."""


class StampedWindows(WindowedProcessor):
    """YAML-configured windows whose results also say when (wall clock, ms) they were emitted, so a
    test can compare that moment with the upstream watermarks seen in the bus."""

    def result(self, key: str, start: int, end: int, value: Any, *, final: bool, late: bool) -> dict[str, Any]:
        import time

        out = super().result(key, start, end, value, final=final, late=late)
        out["emitted_at"] = int(time.time() * 1000)
        return out
