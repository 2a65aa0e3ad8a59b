"""Async processors for the concurrency tests (tests/runtime/test_concurrency.py and the crash harness)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

from processors.counter import CounterNode
from stylus import Processor

#: opened by a test: records with `"hold": true` wait for it (HeldUntilGate)
GATE = threading.Event()
#: attempts per record id (Hangs)
TRIES: Counter[int] = Counter()


class AsyncCounterNode(CounterNode):
    """The paper's Counter Node behind a service call of 0-24 ms: with `concurrency`, records complete out of
    order. The count is read and written with no await in between (docs/acker.md, "State")."""

    async def process(self, record, ctx):
        await asyncio.sleep(record.offset * 7919 % 25 / 1000)
        CounterNode.process(self, record, ctx)


class HeldUntilGate(Processor):
    """Counts per key and emits each record's value after 1 ms; a record with `"hold": true` waits for GATE."""

    async def process(self, record, ctx):
        if record.value.get("hold"):
            while not GATE.is_set():
                await asyncio.sleep(0.005)
        else:
            await asyncio.sleep(0.001)
        if ctx.state is not None:
            ctx.state[record.key] = (ctx.state.get(record.key) or 0) + 1
        ctx.emit(record.value, key=record.key)


class Hangs(Processor):
    """Emits each record's value; a record with `"hang": true` never finishes (its work times out)."""

    async def process(self, record, ctx):
        TRIES[record.value["id"]] += 1
        if record.value.get("hang"):
            await asyncio.sleep(3600)
        await asyncio.sleep(0.001)
        ctx.emit(record.value, key=record.key)
