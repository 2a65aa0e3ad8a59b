"""Async processors and `ctx.defer` one record at a time: everywhere but a worker with `concurrency`.

An `async def process`, and work handed to `ctx.defer`, run under `concurrency` in the worker's event loop,
many records of a partition at once (stylus/core/concurrent.py). Everywhere else (a processor without
`concurrency`, `stylus.testing.TestDriver`, backfill and replay on Spark, a partition's catch-up replay) the
engine runs them in order instead: each record's whole work, deferred units included, completes before the next
record starts, on a private event loop in the engine's thread. Same code, same outputs; only the overlap differs.
The engine's per-record path is untouched for a plain processor: the engine picks `process` or the wrapper
once, when it is built.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

#: `then(result, ctx)`: called with the deferred work's result once it is done, on the record's context
Then = Callable[[Any, Any], None]


def is_async(processor: object) -> bool:
    """Whether the processor's `process` is an `async def`."""
    return inspect.iscoroutinefunction(getattr(type(processor), "process", None))


class InOrder:
    """The private event loop of one engine, and the wrapper that runs a record's work to its end on it."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def wrap(self, processor: Any) -> Callable[[Any, Any], None]:
        """A plain `process(record, ctx)` that runs the processor's async one, and everything it defers, to
        the end."""

        def run(record: Any, ctx: Any) -> None:
            self.loop.run_until_complete(self._complete(processor.process(record, ctx), ctx))

        return run

    async def _complete(self, work: Awaitable[Any], ctx: Any) -> None:
        deferred: list[tuple[Awaitable[Any], Then | None]] = []
        ctx._deferred = deferred
        try:
            await work
            while deferred:  # `then` callbacks may defer more: they join the end of the list
                unit, then = deferred.pop(0)
                result = await unit
                if then is not None:
                    then(result, ctx)
        finally:
            ctx._deferred = None
            for unit, _ in deferred:  # the record failed: what it deferred and nobody awaited is dropped
                _discard(unit)

    def defer(self, ctx: Any, work: Awaitable[Any], then: Then | None) -> None:
        """`ctx.defer` run in order: inside an async `process` (run by `wrap`), the work is awaited once it
        returns; in a plain `process`, now, with `then` called before `defer` returns."""
        check_deferrable(work, then)
        deferred = ctx._deferred
        if deferred is not None:
            deferred.append((work, then))
            return
        result = self.loop.run_until_complete(_awaited(work))
        if then is not None:
            then(result, ctx)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def check_deferrable(work: Any, then: Any) -> None:
    """`ctx.defer` takes an awaitable (a coroutine, a task, a future) and an optional callable."""
    if not inspect.isawaitable(work):
        raise TypeError(f"ctx.defer takes an awaitable (a coroutine, a task or a future), not {type(work).__name__}: "
                        "call the async function (`ctx.defer(fetch(key))`), do not pass the function itself")
    if then is not None and not callable(then):
        raise TypeError(f"ctx.defer(..., then=...) takes a callable `then(result, ctx)`, not {type(then).__name__}")


async def _awaited(work: Awaitable[Any]) -> Any:
    return await work


def _discard(work: Awaitable[Any]) -> None:
    if inspect.iscoroutine(work):
        work.close()  # never started: no "never awaited" warning
    elif isinstance(work, asyncio.Future):
        work.cancel()
