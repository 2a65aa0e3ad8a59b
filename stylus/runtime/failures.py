"""What happens to a record that cannot be decoded or whose `process` raises (`on_error`)."""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from stylus.core.engine import StopProcessing
from stylus.core.task import PartitionTask
from stylus.kafka.errors import client_failed
from stylus.runtime.sink import KafkaSink

log = logging.getLogger(__name__)

#: Headers the dead-letter path adds (documented in docs/faults.md). A record that fails again after
#: `stylus dlq --reinject` carries only the newest set: older ones are dropped, never duplicated.
ERROR_HEADER_PREFIXES = ("stylus.error", "stylus.source.", "stylus.processor")


def without_error_headers(headers: list[tuple[str, bytes]] | None) -> list[tuple[str, bytes]]:
    return [h for h in headers or [] if not h[0].startswith(ERROR_HEADER_PREFIXES)]


def error_headers(msg: Any, exc: BaseException, stage: str) -> list[tuple[str, bytes]]:
    lines = traceback.format_exception_only(type(exc), exc)
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    return [
        ("stylus.error", f"{type(exc).__name__}: {exc}"[:1000].encode()),
        ("stylus.error.stage", stage.encode()),
        ("stylus.error.trace", (lines[-1].strip() + (f" ({where})" if where else ""))[:1000].encode()),
        ("stylus.source.topic", msg.topic().encode()),
        ("stylus.source.partition", str(msg.partition()).encode()),
        ("stylus.source.offset", str(msg.offset()).encode()),
        ("stylus.error.time", str(int(time.time() * 1000)).encode()),
    ]


class FailurePolicy:
    """`dead_letter` (default), `skip` or `stop`, as configured per processor."""

    def __init__(self, policy: str, processor: str, dlq_topic: str, sink: KafkaSink | None) -> None:
        self.policy = policy
        self.processor = processor
        self.dlq_topic = dlq_topic
        self.sink = sink
        self.dead_lettered = 0
        self.skipped = 0
        self._last_log = 0.0

    def __call__(self, msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
        if client_failed(exc):  # the output's producer failed (fenced): not the record's failure, and the
            raise exc  # dead letter would meet the same producer; the worker decides (Worker._drop_if_fenced)
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        if self.policy == "stop":
            raise StopProcessing(
                f"processor `{self.processor}`: {stage} failed at {where}: {type(exc).__name__}: {exc}",
                msg.offset(),
            ) from exc
        sink = task.sink or self.sink  # exactly-once: the dead letter joins the worker's transaction
        if self.policy == "dead_letter" and sink is not None:
            headers = without_error_headers(msg.headers()) + error_headers(msg, exc, stage)
            headers.append(("stylus.processor", self.processor.encode()))
            sink.send(self.dlq_topic, msg.value(), msg.key(), msg.timestamp()[1], headers)
            self.dead_lettered += 1
        else:
            self.skipped += 1
        now = time.monotonic()
        if now - self._last_log > 5.0:  # a burst of bad records must not flood the log
            self._last_log = now
            action = "dead-lettered to " + self.dlq_topic if self.policy == "dead_letter" else "skipped"
            log.warning("%s: %s failed at %s (%s: %s); %s", self.processor, stage, where,
                        type(exc).__name__, exc, action)
