"""Fault injection for crash tests: SIGKILL this process right after a named checkpoint point.

`STYLUS_FAULT_KILL_AFTER=offsets:3` kills the process the 3rd time the `offsets` step finishes.
Points are the step names of stylus/runtime/checkpoint.py plus the transaction's inner points
`txn.stage`, `txn.commit`, `txn.apply`. Unset (the normal case), it costs one attribute check per step.
"""

from __future__ import annotations

import os
import signal

ENV = "STYLUS_FAULT_KILL_AFTER"


class FaultInjector:
    def __init__(self, spec: str | None = None) -> None:
        spec = os.environ.get(ENV) if spec is None else spec
        self.point: str | None = None
        self.remaining = 0
        if spec:
            point, _, count = spec.rpartition(":")
            self.point, self.remaining = point, int(count)

    def passed(self, point: str) -> None:
        if self.point is None or point != self.point:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
