"""Concurrent work inside an input partition (`concurrency: N`), tracked by an acker (docs/acker.md).

A processor whose `process` is an `async def`, or which hands slow I/O to `ctx.defer`, may have up to N records
of each input partition in flight at once. Everything runs on the worker's thread: one asyncio event loop that
the worker drives in bounded slices between its consumer polls (`run`), with no other thread and no queue
between threads. Each record gets a context of its own (`WorkContext`), valid across awaits.

Per input record (`RecordWork`), one attempt at a time (`Attempt`): its units of work (the `process` call, each
deferred awaitable with its `then`) are tracked by the partition's `PartitionAcker` (one XOR per record). When
the record's XOR returns to 0 its outputs go to the sink, in the order emitted, and it stops holding the
partition's committable offset back; a checkpoint saves the lowest offset still incomplete, never waiting for
work in flight. A unit that raises, or a record not complete within `work_timeout`, fails the attempt: its
units are cancelled, its outputs dropped, and the record is tried again, up to `work_attempts` attempts, then
handed to `on_error` (dead letter, skip, or stop).

Rules that make this safe (docs/acker.md, "State"):
- records of one key (in a partition) never overlap: the next starts once the previous one is complete, so
  a record may read its own key's state, await, and write it back; keyless records are not serialised;
- state writes take effect at once, on the one thread: a read-modify-write with no await in between is atomic;
- a failed attempt's state writes are not undone (at-least-once state), its outputs are never emitted.

Kafka-free: the worker hands it consumed messages and gives it `pause`/`resume` callbacks for its consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from stylus.api import Processor, Record
from stylus.core.acker import PartitionAcker
from stylus.core.deferred import Then, check_deferrable, is_async
from stylus.core.engine import NO_HEADERS, Engine, EngineContext, _release
from stylus.core.task import PartitionTask
from stylus.eventtime.clock import clock_of
from stylus.eventtime.control import decode as decode_control
from stylus.eventtime.control import is_control

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: how long `run` waits for work to complete when it is told to wait and some partition could still take input
#: (new records are not seen while it waits)
SHORT_WAIT = 0.005
#: a timed-out attempt's event (the `unit` of a finished event)
_TIMEOUT = 0


class WorkTimeout(TimeoutError):
    """A record's work was not complete within `work_timeout`."""


class Attempt:
    """One try at one record's work: its context, its open futures, its outputs (released when complete)."""

    __slots__ = ("ctx", "futures", "outputs", "over", "root", "timer", "work")

    def __init__(self, work: RecordWork, root: int) -> None:
        self.work = work
        self.root = root  # the acker id of the `process` call
        self.outputs: list[tuple[Any, ...]] = []  # (sink, topic, key, value, timestamp, headers), held by `emit`
        self.futures: set[asyncio.Future[Any]] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.over = False  # complete, failed or dropped: its futures' results no longer count
        self.ctx: WorkContext | None = None

    def cancel(self) -> list[asyncio.Future[Any]]:
        """Give the attempt up: its timer and its open futures are cancelled (returned: they unwind in the
        loop's next passes)."""
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
        cancelled = [future for future in self.futures if future.cancel()]
        self.futures.clear()
        return cancelled


class RecordWork:
    """One input record taken from a partition and not complete yet."""

    __slots__ = ("attempt", "holds_key", "msg", "part", "record", "tries")

    def __init__(self, part: PartitionWork, msg: Any, record: Record) -> None:
        self.part = part
        self.msg = msg
        self.record = record
        self.attempt: Attempt | None = None  # None while waiting for a slot or for its key
        self.holds_key = False  # its key is its own until it is complete (records of a key never overlap)
        self.tries = 0

    @property
    def offset(self) -> int:
        return self.record.offset


class PartitionWork:
    """A partition's records in flight: its acker, the records waiting for a slot, the keys being worked on."""

    __slots__ = ("acker", "admitted", "keys", "paused", "task", "waiting", "works")

    def __init__(self, task: PartitionTask) -> None:
        self.task = task
        self.acker = PartitionAcker()
        task.acker = self.acker  # the checkpoint asks it for the committable offset (PartitionTask.checkpoint_offset)
        self.works: dict[int, RecordWork] = {}  # offset -> every incomplete record (admitted or waiting)
        self.waiting: deque[RecordWork] = deque()  # taken from the consumer, not admitted yet (no slot)
        self.admitted = 0  # records admitted and not complete (running, or queued behind their key): <= limit
        self.keys: dict[str, deque[RecordWork]] = {}  # key -> records of it queued behind the one running
        self.paused = False


class WorkContext(EngineContext):
    """The `ctx` of one record's work under `concurrency`: its own, valid across awaits (the engine's shared
    context is repointed per record). It emits with the engine's code (`EngineContext.emit`, as while a record
    runs without a direct sink): outputs wait in the attempt, bound to their sink, until the record's work is
    complete (`ConcurrentEngine._release`)."""

    __slots__ = ("_attempt", "_runner")

    def __init__(self, runner: ConcurrentEngine, attempt: Attempt, task: PartitionTask) -> None:
        # the fields `emit` reads, taken from the engine's context (not rebuilt: one context per attempt)
        engine = runner.engine
        shared = engine.ctx
        self._runner = runner
        self._attempt = attempt
        self.engine = engine
        self.processor_name = shared.processor_name
        self.record = record = attempt.work.record
        self.state = task.state
        self.watermark = engine.watermark
        self._task = task
        self._timestamp = record.timestamp
        self._default_topic = shared._default_topic
        self._outputs = shared._outputs
        self._routes = shared._routes
        self._fixed = shared._fixed
        self._sink = task.sink or engine.sink
        self._pending = attempt.outputs
        self._direct = None
        self._encode = None  # never the engine's hot path: that one produces directly

    def defer(self, work: Any, then: Then | None = None) -> None:
        self._runner.defer(self._attempt, work, then)

    def table(self, name: str) -> Any:
        """A table (docs/tables.md), looked up in this record's partition and at its timestamp."""
        tables = self._runner.engine.tables
        if tables is None:
            raise LookupError(f"processor `{self.processor_name}` has no table `{name}` here: declare it under "
                              "`tables:` of the pipeline (docs/tables.md)")
        record = self._attempt.work.record
        return tables.view_at(name, record.partition, record.timestamp)

    def set_timer(self, key: str, timestamp: int) -> None:
        raise RuntimeError(f"processor `{self.processor_name}` has `concurrency`: timers need the watermark to wait "
                           "for records in flight, which it does not; remove `concurrency` to use timers")


class ConcurrentEngine:
    """Runs an engine's processor with up to `limit` records per input partition in flight (docs/acker.md)."""

    def __init__(self, engine: Engine, limit: int, timeout: float, attempts: int, *,
                 pause: Callable[[PartitionTask], None] | None = None,
                 resume: Callable[[PartitionTask], None] | None = None) -> None:
        self.engine = engine
        self.limit = limit
        self.timeout = timeout
        self.attempts = attempts
        self._pause = pause
        self._resume = resume
        self.processor: Processor = engine.processor
        self.is_async = is_async(self.processor)
        self.loop = asyncio.new_event_loop()
        self.parts: dict[TP, PartitionWork] = {}
        self.finished: deque[tuple[Attempt, int, asyncio.Future[Any] | None, Then | None]] = deque()
        self.ready: deque[RecordWork] = deque()  # admitted records to start (kept iterative: no recursion)
        self.incomplete = 0  # records taken and not complete, over every partition
        self.handled = 0  # records done with (complete, or settled by `on_error`), for the worker's count
        self.retries = 0
        self.timeouts = 0
        self.unwinding: set[asyncio.Future[Any]] = set()  # cancelled, not finished yet: the loop still runs them
        self._waking = False  # `run` is waiting: the first completion stops the loop
        self._last_log = 0.0

    # ---------------------------------------------------------------- taking input
    @property
    def high(self) -> int:
        """Records a partition may hold: `limit` admitted and as many waiting, so that when a wave of work
        completes the waiting ones start at once, while the consumer's prefetched records refill the wait."""
        return 2 * self.limit

    def room(self, tasks: Iterable[PartitionTask]) -> int:
        """Records the partitions can take (the consumer's batch size); 0: every partition is full, and the worker
        does not consume (librdkafka keeps what it prefetched, bounded by its own queue settings)."""
        free = 0
        for task in tasks:
            part = self.parts.get(task.key)
            free += max(0, self.high - (len(part.works) if part is not None else 0))
        return free

    def admit(self, msgs: Iterable[Any], task_for: Callable[[str, int], PartitionTask]) -> int:
        """Take consumed records: each is begun in its partition's acker (so no checkpoint passes it) and
        started when its partition has a free slot and its key is free. Returns the records done with."""
        handled = self.handled
        engine = self.engine
        touched: set[PartitionWork] = set()
        for msg in msgs:
            key = (msg.topic(), msg.partition())
            part = self.parts.get(key)
            if part is None:
                part = self.parts[key] = PartitionWork(task_for(*key))
            task = part.task
            task.at_eof = False
            offset = msg.offset()
            if task.next_offset is not None and offset < task.next_offset:  # already taken (a refetch): never twice
                continue
            raw_headers = msg.headers()
            if raw_headers and is_control(raw_headers):  # an upstream watermark: never user input
                report = decode_control(msg.value())
                if report is not None:
                    clock_of(task).report(*report)
                engine.control_records += 1
                task.next_offset = offset + 1
                continue
            try:
                raw = msg.value()
                value = None if raw is None else engine.decoders[msg.topic()](raw)
            except Exception as exc:
                engine.failures(msg, exc, "decode", task)  # on_error now: nothing of its is in flight
                task.next_offset = offset + 1
                self.handled += 1
                continue
            raw_key = msg.key()
            record = Record(None if raw_key is None else raw_key.decode("utf-8", "surrogateescape"), value,
                            msg.timestamp()[1], key[0], key[1], offset,
                            dict(raw_headers) if raw_headers else NO_HEADERS)
            work = RecordWork(part, msg, record)
            part.acker.begin(offset)  # its root unit; the id is taken when an attempt starts (`restart`)
            part.works[offset] = work
            self.incomplete += 1
            task.next_offset = offset + 1
            if part.admitted < self.limit and not part.waiting:
                part.admitted += 1
                self.ready.append(work)
            else:
                part.waiting.append(work)
            touched.add(part)
        self._start_ready()
        for part in touched:  # more than it may hold: records of a full partition came with others' (a batch is
            # sized by the room of all): only then is its fetching paused
            if not part.paused and len(part.works) > self.high:
                part.paused = True
                if self._pause is not None:
                    self._pause(part.task)
        return self.handled - handled

    # ---------------------------------------------------------------- running
    @property
    def busy(self) -> bool:
        """Records taken and not complete."""
        return self.incomplete > 0

    @property
    def active(self) -> bool:
        """The loop has something to run: work in flight, or work given up that is still unwinding."""
        return self.incomplete > 0 or bool(self.unwinding)

    def full(self, tasks: Iterable[PartitionTask]) -> bool:
        """No partition can take a record: only completions can change anything."""
        return self.room(tasks) == 0

    def run(self, wait: float) -> int:
        """Drive the event loop: one pass when `wait` is 0, else until some work completes or `wait` seconds
        pass. Then settle what completed: outputs released, records completed, failures retried or handed
        to `on_error` (`StopProcessing` propagates). Returns the records done with."""
        handled = self.handled
        loop = self.loop
        if not self.busy and self.unwinding:  # work given up still unwinding (its `finally` blocks): one pass
            wait = 0.0
        if (self.busy or self.unwinding) and not self.finished:
            if wait > 0:
                self._waking = True
                timer = loop.call_later(wait, loop.stop)
                try:
                    loop.run_forever()
                finally:
                    timer.cancel()
                    self._waking = False
            else:
                loop.call_soon(loop.stop)
                loop.run_forever()
        self._settle()
        return self.handled - handled

    def defer(self, attempt: Attempt, work: Awaitable[Any], then: Then | None) -> None:
        """A new unit of the attempt's record: XORed into its acker entry now, acked once `work` is done and
        `then` has run."""
        check_deferrable(work, then)
        if attempt.over:
            if attempt.work.attempt is not attempt:  # the code of an attempt given up is still running: stop it
                raise asyncio.CancelledError()
            raise RuntimeError("ctx.defer after the record's work was complete: defer only while it runs")
        unit = attempt.work.part.acker.add(attempt.work.offset)
        self._watch(attempt, unit, asyncio.ensure_future(work, loop=self.loop), then)

    def _watch(self, attempt: Attempt, unit: int, future: asyncio.Future[Any], then: Then | None) -> None:
        attempt.futures.add(future)

        def finished(done: asyncio.Future[Any]) -> None:
            self.unwinding.discard(done)
            if not done.cancelled():
                done.exception()  # retrieved here, so a stale attempt's error is never "never retrieved"
            self.finished.append((attempt, unit, done, then))
            if self._waking:
                self.loop.stop()

        future.add_done_callback(finished)

    def _timed_out(self, attempt: Attempt) -> None:
        self.finished.append((attempt, _TIMEOUT, None, None))
        if self._waking:
            self.loop.stop()

    def _start_ready(self) -> None:
        ready = self.ready
        while ready:
            work = ready.popleft()
            key = work.record.key
            if key is not None and not work.holds_key:
                queue = work.part.keys.get(key)
                if queue is not None:  # a record of this key is being worked on: this one follows it
                    queue.append(work)
                    continue
                work.part.keys[key] = deque()
                work.holds_key = True
            self._attempt(work)

    def _attempt(self, work: RecordWork) -> None:
        """Start a try at the record's work: its `process` call is the root unit."""
        acker = work.part.acker
        while True:
            work.tries += 1
            attempt = Attempt(work, acker.restart(work.offset))
            work.attempt = attempt
            attempt.timer = self.loop.call_later(self.timeout, self._timed_out, attempt)
            ctx = attempt.ctx = WorkContext(self, attempt, work.part.task)
            try:
                result = self.processor.process(work.record, ctx)
            except Exception as exc:
                if self._fail(attempt, exc, "process"):
                    continue
                return
            if self.is_async:
                self._watch(attempt, attempt.root, asyncio.ensure_future(result, loop=self.loop), None)  # type: ignore[arg-type]
            else:
                self._ack(attempt, attempt.root)
            return

    def _settle(self) -> None:
        finished = self.finished
        while finished:
            attempt, unit, future, then = finished.popleft()
            if attempt.over:
                continue
            work = attempt.work
            if unit == _TIMEOUT:
                self.timeouts += 1
                if self._fail(attempt, WorkTimeout(f"work not complete within {self.timeout:g}s (work_timeout)"),
                              "timeout"):
                    self._attempt(work)
                continue
            assert future is not None
            attempt.futures.discard(future)
            exc = (asyncio.CancelledError("a unit of the record's work was cancelled") if future.cancelled()
                   else future.exception())
            if exc is None and then is not None:
                try:
                    then(future.result(), attempt.ctx)
                except Exception as error:
                    exc = error
            if exc is not None:
                if self._fail(attempt, exc, "process"):
                    self._attempt(work)
            else:
                self._ack(attempt, unit)
            self._start_ready()

    def _ack(self, attempt: Attempt, unit: int) -> None:
        work = attempt.work
        acker = work.part.acker
        if not acker.completes(work.offset, unit):
            acker.ack(work.offset, unit)
            return
        try:  # the record's last unit: its outputs go out before it stops holding the offset back
            self._release(attempt)
        except Exception as exc:
            if self._fail(attempt, exc, "process"):
                self._attempt(work)
            return
        acker.ack(work.offset, unit)
        attempt.over = True
        if attempt.timer is not None:
            attempt.timer.cancel()
        self._complete(work)

    def _release(self, attempt: Attempt) -> None:
        _release(attempt.outputs)

    def _fail(self, attempt: Attempt, exc: BaseException, stage: str) -> bool:
        """The attempt failed: cancel its units, drop its outputs. True: try the record again; False: it went
        to `on_error` (dead letter or skip) and is done with. `on_error: stop` raises StopProcessing, leaving the
        record incomplete, so no checkpoint passes it."""
        self.unwinding.update(attempt.cancel())
        work = attempt.work
        where = f"{work.record.topic}[{work.record.partition}]@{work.offset}"
        if work.tries < self.attempts:
            self.retries += 1
            now = time.monotonic()
            if now - self._last_log > 5.0:  # many failing records must not flood the log
                self._last_log = now
                log.warning("%s: work on %s failed (attempt %d of %d, %s: %s); trying it again", self.engine.name,
                            where, work.tries, self.attempts, type(exc).__name__, exc)
            return True
        if isinstance(exc, asyncio.CancelledError):  # an Exception for `on_error`, which logs and dead-letters it
            exc = RuntimeError(str(exc) or "cancelled")
        self.engine.failures(work.msg, exc, stage, work.part.task)
        work.part.acker.done(work.offset)
        self._complete(work)
        return False

    def _complete(self, work: RecordWork) -> None:
        """The record is done with: free its slot and its key, admit what waits."""
        part = work.part
        part.works.pop(work.offset, None)
        self.incomplete -= 1
        self.handled += 1
        part.admitted -= 1
        if work.holds_key:
            work.holds_key = False
            key = work.record.key
            assert key is not None
            queue = part.keys[key]
            if queue:  # the next record of the key (admitted already) takes it over
                successor = queue.popleft()
                successor.holds_key = True
                self.ready.append(successor)
            else:
                del part.keys[key]
        while part.waiting and part.admitted < self.limit:
            part.admitted += 1
            self.ready.append(part.waiting.popleft())
        if part.paused and len(part.works) <= self.limit:
            part.paused = False
            if self._resume is not None:
                self._resume(part.task)

    # ---------------------------------------------------------------- partitions leaving, shutdown
    def drop(self, tasks: Iterable[PartitionTask]) -> None:
        """The partitions are no longer ours (revoked after their checkpoint, or lost): their work in flight is
        cancelled and forgotten. Their next owner reads it again from the committed offset."""
        for task in tasks:
            part = self.parts.get(task.key)
            if part is None or part.task is not task:
                continue
            if part.paused and self._resume is not None:
                with contextlib.suppress(Exception):  # the consumer's pause outlives an assignment otherwise
                    self._resume(task)
            del self.parts[task.key]
            for work in part.works.values():
                if work.attempt is not None:
                    self.unwinding.update(work.attempt.cancel())
            self.incomplete -= len(part.works)
            part.works.clear()
            part.waiting.clear()
            part.keys.clear()
            part.acker.clear()
            task.acker = None
        self.ready = deque(work for work in self.ready if work.part.task.key in self.parts
                           and self.parts[work.part.task.key] is work.part)

    def close(self) -> None:
        """Cancel whatever is in flight and let it unwind, then close the loop."""
        for part in self.parts.values():
            for work in part.works.values():
                if work.attempt is not None:
                    work.attempt.cancel()
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        if pending:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
        self.loop.close()


def concurrency_problem(pipeline: Any, name: str, cls: type[Processor]) -> str | None:
    """Why this processor class cannot run with `concurrency` in this pipeline, or None. Checked where the class
    is imported (`stylus validate`, and before a worker starts)."""
    import stylus.api
    from stylus.eventtime.topology import publishes

    batch = getattr(stylus.api, "BatchProcessor", None)
    if batch is not None and issubclass(cls, batch):
        return "it is a BatchProcessor: `concurrency` applies to per-record processors"
    if cls.on_timer is not Processor.on_timer:
        return ("its class overrides `on_timer`: timers fire as the watermark passes them, and the watermark does "
                "not wait for records still in flight")
    if publishes(pipeline, name):
        downstream = sorted(c for t in pipeline.processors[name].outputs for c in pipeline.consumers_of(t))
        return (f"a processor downstream ({', '.join(downstream)}, or further) works in event time, so this one "
                "publishes watermarks, which would pass outputs of records still in flight")
    return None
