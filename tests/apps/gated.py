"""A processor whose progress a test controls: it waits while a gate file exists, and can be slowed
down per record, so tests can hold a known backlog and then watch it drain."""

from __future__ import annotations

import time
from pathlib import Path

from stylus import Processor


class Gated(Processor):
    """Pass records through; block while `config.gate` exists; sleep `config.delay` seconds per record."""

    def process(self, record, ctx):
        gate = self.config.get("gate")
        while gate and Path(gate).exists():
            time.sleep(0.02)
        delay = float(self.config.get("delay", 0))
        if delay:
            time.sleep(delay)
        ctx.emit(record.value, key=record.key)
