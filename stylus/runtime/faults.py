"""Fault injection for crash and fault tests, at the named points of a checkpoint.

`STYLUS_FAULT_KILL_AFTER=offsets:3` SIGKILLs the process the 3rd time the `offsets` step finishes.
`STYLUS_FAULT_PAUSE_AFTER=state:2:8` stalls the thread running the checkpoint for 8 s the 2nd time the
`state` step finishes (once), so a test can start a rebalance, stall the broker or let a transaction time
out in the middle of a checkpoint. Points are the step names of stylus/runtime/checkpoint.py plus the
transaction's inner points `txn.stage`, `txn.commit`, `txn.apply`, `txn.stage.no-input` (a
transaction of timers only, which consumed no input) and `txn.mark` (before the transaction of an
ownership mark: a partition claimed on assignment, or released on revocation).
`STYLUS_FAULT_ABORT_AT=txn.stage:3` fails the transaction with `Aborted` the 3rd time a partition is
staged (`txn.stage`), as a lost connection or a hung client call would (after the pause, where both name
the same point): the client's transaction is aborted first, so, as after a real failure, it takes no more
records until the next one begins. Unset (the normal case), each costs one attribute check per step.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

ENV = "STYLUS_FAULT_KILL_AFTER"
PAUSE_ENV = "STYLUS_FAULT_PAUSE_AFTER"
ABORT_ENV = "STYLUS_FAULT_ABORT_AT"

log = logging.getLogger(__name__)


class FaultInjector:
    def __init__(self, spec: str | None = None, pause: str | None = None, abort: str | None = None) -> None:
        spec = os.environ.get(ENV) if spec is None else spec
        pause = os.environ.get(PAUSE_ENV) if pause is None else pause
        abort = os.environ.get(ABORT_ENV) if abort is None else abort
        self.point, self.remaining = _point_and_count(spec)
        self.abort_point, self.abort_remaining = _point_and_count(abort)
        self.pause_point: str | None = None
        self.pause_remaining = 0
        self.pause_seconds = 0.0
        if pause:
            point, count, seconds = pause.rsplit(":", 2)
            self.pause_point, self.pause_remaining, self.pause_seconds = point, int(count), float(seconds)

    def passed(self, point: str, on_abort: Callable[[], None] | None = None) -> None:
        """`point` was reached. An abort injected here first calls `on_abort`: what the failing client call
        would have left behind (a transaction the client no longer has open)."""
        if point == self.pause_point:
            self.pause_remaining -= 1
            if self.pause_remaining == 0:
                log.warning("fault injected: pausing %.1fs after %s", self.pause_seconds, point)
                time.sleep(self.pause_seconds)
                log.warning("fault injected: pause after %s over", point)
        if point == self.abort_point:
            self.abort_remaining -= 1
            if self.abort_remaining == 0:
                from stylus.runtime.transactions import Aborted  # the checkpoint's own failure type

                log.warning("fault injected: transaction aborted at %s", point)
                if on_abort is not None:
                    on_abort()
                raise Aborted(f"fault injected: transaction aborted at {point}")
        if self.point is None or point != self.point:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            os.kill(os.getpid(), signal.SIGKILL)


def _point_and_count(spec: str | None) -> tuple[str | None, int]:
    if not spec:
        return None, 0
    point, _, count = spec.rpartition(":")
    return point, int(count)
