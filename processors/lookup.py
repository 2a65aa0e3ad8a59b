"""The paper's Joiner pattern: each record needs an answer from another service ("may need to query an arbitrary
service"), here a simulated one that takes `latency` per call.

Three ways to write the same processor, with the same outputs for the same input (docs/acker.md):
- `Lookup`: plain `process`, a blocking call per record: one record at a time per worker;
- `AsyncLookup`: `async def process`, awaiting the call: with `concurrency: N`, N records of a partition wait
  on the service at once;
- `DeferredLookup`: plain `process` that hands the call to `ctx.defer(..., then=...)`: the same overlap,
  without writing the processor as a coroutine.

Each output names its input (`src`), and a stateful run also counts the records seen per key (`seen`):
records of one key are never worked on at once, so the counts come out as a synchronous run makes them.

```yaml
  enricher:
    class: processors.lookup:AsyncLookup
    inputs: [events]
    outputs: [enriched]
    config: {latency: 20ms}
    concurrency: 64
    semantics: {state: at_least_once, output: at_least_once}
```
"""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any

from stylus import Context, Processor, Record
from stylus.config.durations import parse_duration


def answer(key: str) -> dict[str, Any]:
    """What the simulated service knows about `key`: a pure function of it."""
    digest = zlib.crc32(key.encode())
    return {"segment": digest % 7, "score": digest % 1000 / 10}


class SimulatedService:
    """A lookup that takes `latency` seconds: `fetch` awaits it (asyncio.sleep), `fetch_blocking` blocks the
    caller's thread for it (time.sleep). `calls` counts both."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.calls = 0

    async def fetch(self, key: str) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(self.latency)
        return answer(key)

    def fetch_blocking(self, key: str) -> dict[str, Any]:
        self.calls += 1
        time.sleep(self.latency)
        return answer(key)


class _LookupBase(Processor):
    def setup(self, ctx: Context) -> None:
        self.service = SimulatedService(parse_duration(self.config.get("latency", "20ms")))

    @staticmethod
    def lookup_key(record: Record) -> str:
        return record.key if record.key is not None else str(record.value)

    @staticmethod
    def joined(record: Record, info: dict[str, Any], ctx: Context) -> None:
        """Emit the record joined with the service's answer; count it per key when stateful (read and write
        with no await in between)."""
        key = record.key
        out: dict[str, Any] = {"value": record.value, "src": f"{record.topic}:{record.partition}:{record.offset}",
                               **info}
        if ctx.state is not None and key is not None:
            seen = (ctx.state.get(key) or 0) + 1
            ctx.state[key] = seen
            out["seen"] = seen
        ctx.emit(out, key=key)


class Lookup(_LookupBase):
    """One blocking call per record."""

    def process(self, record: Record, ctx: Context) -> None:
        self.joined(record, self.service.fetch_blocking(self.lookup_key(record)), ctx)


class AsyncLookup(_LookupBase):
    """The same, awaiting the call: with `concurrency`, records overlap while they wait."""

    async def process(self, record: Record, ctx: Context) -> None:
        info = await self.service.fetch(self.lookup_key(record))
        self.joined(record, info, ctx)


class DeferredLookup(_LookupBase):
    """The same with a plain `process`: the call is deferred, and `then` emits once it answers."""

    def process(self, record: Record, ctx: Context) -> None:
        ctx.defer(self.service.fetch(self.lookup_key(record)), then=lambda info, c: self.joined(record, info, c))
