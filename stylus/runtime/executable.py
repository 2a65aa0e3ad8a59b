"""Executable processors (Swift): any program that answers one JSON line per input record (docs/executable.md).

One thread, non-blocking pipes: the worker consumes, writes input lines to the program's stdin as far as the
pipe takes them, reads its answers and stderr, produces the outputs and commits. At most `command_window`
lines are in flight, so every buffer is bounded, and nothing blocks on the program: a program that stops
answering for `command_timeout` is killed and restarted like one that exits. Answers come back in input order,
so the oldest unanswered record is the head of `pending` and each partition's acknowledged position only grows.

At-least-once: input offsets are committed up to the last answered record of each partition, after the broker
acknowledged every output produced so far. A restarted program is sent every unanswered record again.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from stylus.config.loader import command_dir
from stylus.config.model import Pipeline
from stylus.core.engine import StopProcessing
from stylus.core.groupings import Routes
from stylus.core.task import PartitionTask
from stylus.kafka.callbacks import subscribe
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import client_config
from stylus.runtime.failures import FailurePolicy
from stylus.runtime.gctune import tune_for_streaming
from stylus.runtime.sink import KafkaSink, message_max_bytes
from stylus.runtime.stats import WorkerStats
from stylus.runtime.worker import WorkerFailed
from stylus.serde import decode_key, decoder

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: how long `_close` waits for the program to exit once its stdin is closed, before killing it
EXIT_GRACE = 5.0
#: longest stdout line (one answer) kept in memory; a longer one is a protocol error
MAX_LINE = 64 * 1024 * 1024


def _wait(readers: list[Any], writers: list[Any], timeout: float) -> tuple[list[Any], list[Any]]:
    """The pipes ready to read (data, or closed) and to write, waiting up to `timeout`. poll, not select: a
    process with many RocksDB files and sockets has descriptors past select's 1024."""
    poller = select.poll()
    by_fd = {}
    for pipe in readers:
        poller.register(pipe.fileno(), select.POLLIN)
        by_fd[pipe.fileno()] = pipe
    for pipe in writers:
        poller.register(pipe.fileno(), select.POLLOUT)
        by_fd[pipe.fileno()] = pipe
    readable, writable = [], []
    for fd, events in poller.poll(timeout * 1000):
        pipe = by_fd[fd]
        if pipe in readers and events & (select.POLLIN | select.POLLHUP | select.POLLERR):
            readable.append(pipe)
        if pipe in writers and events & (select.POLLOUT | select.POLLERR | select.POLLHUP):
            writable.append(pipe)
    return readable, writable


class ProgramFailed(RuntimeError):
    """The program exited, stopped answering or broke the protocol: it is restarted."""


class _NoTask:
    sink = None  # FailurePolicy writes a dead letter to `task.sink or` its own sink: here always its own


@dataclass
class Pending:
    msg: Message
    line: bytes  # the JSON line sent to the program; b"" for a record that failed to decode
    error: Exception | None = None  # why it failed: handed to `on_error` in its turn, never to the program


class Program:
    """The running program: its pipes (non-blocking, ours ends) and what is buffered on each."""

    def __init__(self, command: tuple[str, ...], cwd: str, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.stdin, self.stdout, self.stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
        for pipe in (self.stdin, self.stdout, self.stderr):
            os.set_blocking(pipe.fileno(), False)
        self.out = bytearray()  # written to stdin when the pipe takes it
        self.answers = bytearray()  # stdout not yet split into lines
        self.errors = bytearray()  # stderr not yet split into lines
        self.eof = False  # stdout closed: the program exited (or closed it)
        self.stderr_eof = False  # not watched any more (a closed pipe is always readable)
        self.stdin_closed = False  # a write met a broken pipe

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pump(self, timeout: float) -> list[bytes]:
        """Write what the pipe takes, read what is there (waiting up to `timeout` for something to do) and
        return the complete answer lines."""
        readers = [pipe for pipe, done in ((self.stdout, self.eof), (self.stderr, self.stderr_eof)) if not done]
        writers = [self.stdin] if self.out else []
        try:
            readable, writable = _wait(readers, writers, timeout)
        except ValueError:  # a closed pipe
            raise ProgramFailed("its pipes are closed") from None
        if writable:
            try:
                written = os.write(self.stdin.fileno(), self.out)
                del self.out[:written]
            except BlockingIOError:
                pass
            except BrokenPipeError:  # it exited (most likely) or closed stdin: the caller tells which
                self.stdin_closed = True
                self.out.clear()
        if self.stderr in readable:
            self._read_stderr()
        if self.stdout in readable:
            chunk = self._read(self.stdout)
            if chunk == b"":
                self.eof = True
            elif chunk:
                self.answers += chunk
        lines = []
        while (end := self.answers.find(b"\n")) >= 0:
            lines.append(bytes(self.answers[:end]))
            del self.answers[: end + 1]
        if len(self.answers) > MAX_LINE:
            raise ProgramFailed(f"an answer line longer than {MAX_LINE} bytes")
        return lines

    @staticmethod
    def _read(pipe: Any) -> bytes | None:
        try:
            return cast(bytes, os.read(pipe.fileno(), 1 << 16))
        except BlockingIOError:
            return None

    def _read_stderr(self) -> None:
        chunk = self._read(self.stderr)
        if chunk:
            self.errors += chunk
        self.stderr_eof = chunk == b""
        while (end := self.errors.find(b"\n")) >= 0 or len(self.errors) > 8192 or (chunk == b"" and self.errors):
            cut = end if end >= 0 else len(self.errors)
            log.warning("%s[%d] stderr: %s", self.name, self.pid, self.errors[:cut].decode("utf-8", "replace"))
            del self.errors[: cut + 1]

    def exited(self) -> int | None:
        return self.proc.poll()

    def stop(self, grace: float) -> None:
        """Close stdin (a well-behaved program then exits), kill it after `grace`, and log what stderr had."""
        with contextlib.suppress(OSError):
            self.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        self.kill()

    def kill(self) -> None:
        """SIGKILL its whole process group: a script's children (jq, awk) must not hold the pipes open."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._drain_stderr()
        for pipe in (self.stdin, self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                pipe.close()

    def _drain_stderr(self) -> None:
        """Log the last of stderr (it often says why the program died); a second at most."""
        deadline = time.monotonic() + 1.0
        while not self.stderr.closed and time.monotonic() < deadline:
            if not _wait([self.stderr], [], 0.05)[0]:
                continue
            chunk = self._read(self.stderr)
            if not chunk:
                break
            self.errors += chunk
        for line in bytes(self.errors).decode("utf-8", "replace").splitlines():
            log.warning("%s[%d] stderr: %s", self.name, self.pid, line)
        self.errors.clear()


class ExecutableWorker:
    """A `command:` processor: one consumer-group member feeding one program (docs/executable.md)."""

    def __init__(self, pipeline: Pipeline, name: str, bootstrap: str, *, stop: threading.Event | None = None,
                 exit_when_idle: float | None = None, upstream_done: Callable[[], bool] = lambda: True,
                 instance: str = "0") -> None:
        self.pipeline = pipeline
        self.name = name
        self.spec = spec = pipeline.processors[name]
        assert spec.command is not None
        self.command = spec.command
        self.cwd = str(command_dir(pipeline))
        self.stop_event = stop or threading.Event()
        self.exit_when_idle = exit_when_idle
        self.upstream_done = upstream_done
        self.group_id = pipeline.group_id(name)
        self.stats = WorkerStats()
        self.processed = 0  # input records answered
        self.restarts = 0  # programs restarted after an exit, a timeout or a protocol error
        self.rebalances = 0
        self.checkpoints = 0  # commits
        self.finished = False
        self.assigned_once = False
        self.tasks: dict[TP, PartitionTask] = {}  # what the metrics read: positions and committed offsets
        self.decoders = {t: decoder(pipeline.topics[t].serde) for t in spec.inputs}
        producer_config = client_config("producer", bootstrap, pipeline, name,
                                        **{"client.id": f"{self.group_id}-{instance}"})
        self.sink: KafkaSink
        self.producer = Producer(producer_config | {"on_delivery": lambda err, msg: self.sink.on_delivery(err, msg)})
        self.sink = KafkaSink(self.producer, pipeline, spec.outputs, hold=False,
                              max_bytes=message_max_bytes(producer_config))
        self.routes = Routes(pipeline, spec)  # `grouping: all|global` outputs, and `partition` in an answer
        self.failures = FailurePolicy(spec.on_error, name, pipeline.dlq_topic(name), self.sink)
        self.consumer = Consumer(client_config(
            "consumer", bootstrap, pipeline, name,
            **{"group.id": self.group_id, "client.id": f"{self.group_id}-{instance}"})
            | {"error_cb": lambda err: log.warning("%s: kafka: %s", name, err)})
        self.pending: collections.deque[Pending] = collections.deque()  # written, not yet answered; oldest first
        self.acked: dict[TP, int] = {}  # next offset after the last answered record, per partition
        self.at_eof: dict[TP, bool] = {}
        self.since_commit = 0  # records answered since the last commit
        self.bytes_since_commit = 0
        self.program: Program | None = None
        self.last_answer = time.monotonic()  # or the last write to an empty window: the stuck-program clock
        self.failed_in_a_row = 0  # restarts with no answer in between: they wait longer and longer
        self.strikes: tuple[TP, int, int] | None = None  # (partition, offset, crashes in a row) of the oldest record
        self._idle_since: float | None = None

    # ---------------------------------------------------------------- lifecycle
    def run(self) -> None:
        """Consume, feed the program, commit; until stopped or idle. Raises WorkerFailed on error."""
        tune_for_streaming()  # each record allocates its line and its answer's objects, as a Python worker's do
        subscribe(self.consumer, list(self.spec.inputs), on_assign=self._on_assign, on_revoke=self._on_revoke,
                  on_lost=self._on_lost)
        next_commit = time.monotonic() + self.spec.checkpoint.interval
        error: BaseException | None = None
        try:
            self._start_program()
            while not self.stop_event.is_set():
                got = self._consume()
                self._exchange(0.0 if got else 0.05)
                self.producer.poll(0)
                now = time.monotonic()
                if now >= next_commit or self._commit_due():
                    self._commit()
                    next_commit = now + self.spec.checkpoint.interval
                if self.exit_when_idle is not None and self._idle(now):
                    log.info("%s: inputs consumed and idle for %.1fs; stopping", self.name, self.exit_when_idle)
                    break
        except StopProcessing as exc:
            error = exc
        except BaseException as exc:
            self._close(commit=False)
            raise WorkerFailed(f"processor `{self.name}` failed: {type(exc).__name__}: {exc}") from exc
        self._close(commit=True)
        if error is not None:
            raise WorkerFailed(str(error)) from error

    def _consume(self) -> int:
        """Take new records while the window has room; they are queued for the program's stdin."""
        room = self.spec.command_window - len(self.pending)
        if room <= 0:
            return 0
        msgs = self.consumer.consume(num_messages=min(room, self.spec.batch_size), timeout=0 if self.pending else 0.1)
        good = 0
        for msg in msgs:
            err = msg.error()
            tp = (msg.topic(), msg.partition())
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_eof[tp] = True
                else:
                    log.warning("%s: consumer error: %s", self.name, err)
                continue
            if tp not in self.tasks:  # a revoked partition's leftover
                continue
            self.at_eof[tp] = False
            self._idle_since = None
            self.tasks[tp].next_offset = msg.offset() + 1
            try:
                entry = Pending(msg, self._encode(msg))
            except Exception as exc:  # undecodable input: on_error, as for a Python processor, in input order
                entry = Pending(msg, b"", exc)
            if not self.pending:
                self.last_answer = time.monotonic()
            self.pending.append(entry)
            if self.program is not None:
                self.program.out += entry.line
            good += 1
        self._settle()
        return good

    def _settle(self) -> None:
        """Hand undecodable records at the head of the window to `on_error`: their turn has come (every record
        before them is answered), so acknowledging them moves no commit past an unanswered record."""
        while self.pending and self.pending[0].error is not None:
            entry = self.pending.popleft()
            self.failures(entry.msg, cast(Exception, entry.error), "decode", cast(PartitionTask, _NoTask))
            self._acknowledge(entry.msg)

    def _encode(self, msg: Message) -> bytes:
        raw = msg.value()
        value = None if raw is None else self.decoders[msg.topic()](raw)
        if isinstance(value, bytes):  # a bytes topic: JSON has no bytes, so the text (invalid UTF-8 escaped)
            value = value.decode("utf-8", "surrogateescape").encode("utf-8", "backslashreplace").decode()
        return orjson.dumps({"key": decode_key(msg.key()), "value": value, "timestamp": msg.timestamp()[1],
                             "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()},
                            option=orjson.OPT_APPEND_NEWLINE)

    # ---------------------------------------------------------------- the program
    def _start_program(self) -> None:
        self.program = Program(self.command, self.cwd, self.name)
        self.program.out += b"".join(p.line for p in self.pending)  # every unanswered record, again
        self.last_answer = time.monotonic()
        log.info("%s: started `%s` (pid %d) in %s, %d records to resend", self.name, " ".join(self.command),
                 self.program.pid, self.cwd, len(self.pending))

    def _exchange(self, timeout: float) -> None:
        """Move bytes over the pipes and handle the answers; restart the program when it fails."""
        program = self.program
        assert program is not None
        try:
            for line in program.pump(timeout):
                self._answer(line)
            if program.eof or program.stdin_closed or program.exited() is not None:
                deadline = time.monotonic() + 1.0
                while not program.eof and time.monotonic() < deadline:  # answers still in the pipe count
                    for line in program.pump(0.05):
                        self._answer(line)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    program.proc.wait(1.0)  # a closed pipe usually means an exit: report its code
                code = program.exited()
                raise ProgramFailed(f"it exited with code {code}" if code is not None else
                                    f"it closed its {'stdout' if program.eof else 'stdin'}")
            if self.pending and time.monotonic() - self.last_answer > self.spec.command_timeout:
                raise ProgramFailed(f"no answer for {self.spec.command_timeout:g}s")
        except ProgramFailed as exc:
            self._restart(str(exc))

    def _answer(self, line: bytes) -> None:
        if not self.pending:
            raise ProgramFailed("an answer line with no input line to answer")
        try:
            outputs = orjson.loads(line)
            if not isinstance(outputs, list) or not all(isinstance(o, dict) and "value" in o for o in outputs):
                raise ValueError("not a JSON list of {\"value\": ...} objects")
        except ValueError as exc:
            raise ProgramFailed(f"a bad answer line ({exc}): {line[:200]!r}") from None
        msg = self.pending[0].msg
        for out in outputs:
            topic = out.get("topic") or (self.spec.outputs[0] if self.spec.outputs else None)
            if topic not in self.sink.encoders:
                raise ProgramFailed(f"an output to `{topic}`, which is not among the processor's outputs "
                                    f"{list(self.spec.outputs)}")
            key = None if out.get("key") is None else str(out["key"])
            try:
                for partition in self.routes.each(topic, out.get("partition")):  # groupings (docs/groupings.md)
                    self.sink(topic, key, out["value"], msg.timestamp()[1], None, partition)
            except (TypeError, ValueError, KafkaException) as exc:  # the serde or the producer refuses it
                raise ProgramFailed(f"an output `{topic}` cannot take: {exc}") from None
        self.pending.popleft()
        self.last_answer = time.monotonic()
        self.strikes = None
        self.failed_in_a_row = 0
        self.processed += 1
        self._acknowledge(msg)
        self._settle()

    def _acknowledge(self, msg: Message) -> None:
        self.acked[(msg.topic(), msg.partition())] = msg.offset() + 1
        self.since_commit += 1
        self.bytes_since_commit += len(msg.value() or b"") + len(msg.key() or b"")

    def _restart(self, why: str) -> None:
        """Kill the program and start it again on every unanswered record; a record the program keeps failing
        on (the oldest unanswered, `command_attempts` times in a row) goes to `on_error` first."""
        program = self.program
        assert program is not None
        program.kill()
        self.program = None  # none until started again (`on_error: stop` ends the worker in between)
        self.restarts += 1
        head = self.pending[0].msg if self.pending else None
        where = f" at {head.topic()}[{head.partition()}]@{head.offset()}" if head is not None else ""
        log.warning("%s: program `%s` (pid %d) failed%s: %s; restarting it (restart %d)", self.name,
                    " ".join(self.command), program.pid, where, why, self.restarts)
        if head is not None:
            tp, offset = (head.topic(), head.partition()), head.offset()
            strikes = self.strikes[2] + 1 if self.strikes and self.strikes[:2] == (tp, offset) else 1
            self.strikes = (tp, offset, strikes)
            if strikes >= self.spec.command_attempts:
                self.strikes = None
                self.pending.popleft()
                failure = ProgramFailed(f"`{' '.join(self.command)}` failed {strikes} times in a row on this "
                                        f"record; last: {why}")
                self.failures(head, failure, "command", cast(PartitionTask, _NoTask))  # may raise StopProcessing
                self._acknowledge(head)
                self._settle()
        self.failed_in_a_row += 1
        if self.failed_in_a_row > 1:  # a program that cannot start, or dies at once, must not spin the CPU
            self.stop_event.wait(min(0.05 * 2 ** (self.failed_in_a_row - 2), 2.0))
        self._start_program()

    # ---------------------------------------------------------------- commits
    def _commit_due(self) -> bool:
        every = self.spec.checkpoint
        return ((every.records is not None and self.since_commit >= every.records)
                or (every.bytes is not None and self.bytes_since_commit >= every.bytes))

    def _commit(self, only: set[TP] | None = None) -> None:
        """Commit each partition's acknowledged position once the broker has every output before it."""
        offsets = [TopicPartition(t, p, o) for (t, p), o in self.acked.items()
                   if (only is None or (t, p) in only) and (t, p) in self.tasks
                   and self.tasks[(t, p)].committed_offset != o]
        if not offsets:
            return
        started = time.monotonic()
        self.sink.flush(max(self.spec.command_timeout, 30.0))  # raises DeliveryFailed: nothing is committed
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # a rebalance under way, a coordinator moving: the next commit retries
            log.warning("%s: commit of %s failed (%s); retried at the next one", self.name,
                        ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in offsets), exc.args[0])
            return
        for tp in offsets:
            self.tasks[(tp.topic, tp.partition)].committed_offset = tp.offset
        if only is None:
            self.since_commit = self.bytes_since_commit = 0
        self.checkpoints += 1
        self.stats.checkpoint.observe(time.monotonic() - started)

    # ---------------------------------------------------------------- rebalances
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.assigned_once = True
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self.tasks[key] = PartitionTask(tp.topic, tp.partition, None)
            self.at_eof[key] = False

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit up to the last answered record of the revoked partitions, then restart the program's stream
        without their unanswered records (the next owner reads them from the commit)."""
        self.rebalances += 1
        gone = {(tp.topic, tp.partition) for tp in partitions}
        log.info("%s: revoking %s; committing up to their last answered records", self.name,
                 ", ".join(f"{t}[{p}]@{self.acked.get((t, p))}" for t, p in sorted(gone)))
        try:
            self._commit(only=gone)
        except Exception as exc:  # the new owner replays from the older commit: at-least-once still holds
            log.warning("%s: commit on revocation failed: %s", self.name, exc)
        self._forget(gone)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._forget({(tp.topic, tp.partition) for tp in partitions})

    def _forget(self, gone: set[TP]) -> None:
        for tp in gone:
            self.tasks.pop(tp, None)
            self.acked.pop(tp, None)
            self.at_eof.pop(tp, None)
        kept = collections.deque(p for p in self.pending if (p.msg.topic(), p.msg.partition()) not in gone)
        if len(kept) == len(self.pending):
            return
        dropped, self.pending = len(self.pending) - len(kept), kept
        self._settle()
        if self.program is not None:  # it holds lines of partitions no longer ours: a fresh stream
            log.info("%s: restarting the program's stream without %d unanswered records of the partitions "
                     "given up", self.name, dropped)
            self.program.kill()
            self.strikes = None
            self._start_program()

    # ---------------------------------------------------------------- idle and close
    def _idle(self, now: float) -> bool:
        assert self.exit_when_idle is not None
        caught_up = (self.assigned_once and not self.pending and all(self.at_eof.get(tp) for tp in self.tasks)
                     and self.upstream_done())
        if not caught_up:
            self._idle_since = None
            return False
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since >= self.exit_when_idle

    def _close(self, *, commit: bool) -> None:
        """Let the program answer what it has (up to `command_timeout`), commit, and stop it."""
        try:
            if commit:
                deadline = time.monotonic() + self.spec.command_timeout
                try:
                    while (self.program is not None and self.pending and time.monotonic() < deadline
                           and self.program.exited() is None):
                        for line in self.program.pump(0.05):
                            self._answer(line)
                except ProgramFailed as exc:  # what was answered before still gets committed
                    log.warning("%s: program failed while stopping: %s", self.name, exc)
                self._commit()
        except Exception:
            log.exception("%s: error while closing", self.name)
        finally:
            program, self.program = self.program, None  # the revocation in `consumer.close` starts none
            if program is not None:
                program.stop(EXIT_GRACE)
            try:
                self.consumer.close()
            except Exception:
                log.exception("%s: error while closing the consumer", self.name)
            self.producer.flush(10)
            close_producer(self.producer)
            self.finished = True
