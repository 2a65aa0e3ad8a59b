"""Shared by the chaos tests (tests/chaos/) and bench/chaos.py: a rate-limited feeder, `stylus run` instances
that can be killed, frozen and resumed, waiting on conditions with deadlines, reading state directories."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.kafka.offsets import end_offsets
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.support.cli import ROOT, stylus_cmd, stylus_env


@dataclass(frozen=True)
class Rec:
    """One input record: key, JSON value, timestamp (ms) and, when not None, the partition to write to."""

    key: str | None
    value: dict[str, Any]
    ts: int
    partition: int | None = None


def wait_until(check: Callable[[], Any], timeout: float, what: str, *, interval: float = 0.1,
               explain: Callable[[], str] | None = None) -> Any:
    """Poll `check` until it returns something true; fail with `what` (and `explain()`) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


class Feeder(threading.Thread):
    """Produces `records` in order at `rate` records per second (keyed with the Java partitioner unless a
    record names its partition), from its own idempotent producer. `pause_event` (cleared) holds it."""

    def __init__(self, bootstrap: str, topic: str, records: Sequence[Rec], rate: float) -> None:
        super().__init__(daemon=True, name=f"feeder-{topic}")
        self.topic = topic
        self.records = records
        self.rate = rate
        # log_level 2: the broker faults make librdkafka print every refused connection; failures still surface
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                                  "partitioner": "murmur2_random", "message.timeout.ms": 120_000, "log_level": 2})
        self.sent = 0
        self.stop_flag = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            started = time.monotonic()
            while self.sent < len(self.records) and not self.stop_flag.is_set():
                due = min(len(self.records), int((time.monotonic() - started) * self.rate) + 1)
                while self.sent < due:
                    rec = self.records[self.sent]
                    kwargs: dict[str, Any] = {"timestamp": rec.ts}
                    if rec.partition is not None:
                        kwargs["partition"] = rec.partition
                    try:
                        self.producer.produce(self.topic, orjson.dumps(rec.value),
                                              None if rec.key is None else rec.key.encode(), **kwargs)
                    except BufferError:
                        self.producer.poll(0.05)
                        continue
                    self.sent += 1
                self.producer.poll(0)
                time.sleep(0.01)
            left = self.producer.flush(120)
            if left:
                raise RuntimeError(f"{left} records of {self.topic} not acknowledged within 120 s")
        except BaseException as exc:  # handed to whoever joins
            self.error = exc
        finally:
            self.finished.set()

    def join_checked(self, timeout: float) -> None:
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"the feeder of {self.topic} did not finish within {timeout:g}s "
                                 f"({self.sent}/{len(self.records)} sent)")
        if self.error is not None:
            raise self.error


def produce_now(bootstrap: str, topic: str, records: Sequence[Rec]) -> None:
    """Produce records at once and wait for every acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         "partitioner": "murmur2_random", "log_level": 2})
    for rec in records:
        kwargs: dict[str, Any] = {"timestamp": rec.ts}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        while True:
            try:
                producer.produce(topic, orjson.dumps(rec.value), None if rec.key is None else rec.key.encode(),
                                 **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


class Instance:
    """One `stylus run` process with its log file; started, SIGKILLed, frozen and resumed by the test."""

    def __init__(self, pipeline_path: Path, log: Path, bootstrap: str, *, name: str,
                 processors: Sequence[str] = (), exit_when_idle: float | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.pipeline_path = pipeline_path
        self.log = log
        self.bootstrap = bootstrap
        self.name = name
        self.processors = tuple(processors)
        self.exit_when_idle = exit_when_idle
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.paused = False

    def start(self, *, exit_when_idle: float | None = None) -> Instance:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is already running"
        idle = self.exit_when_idle if exit_when_idle is None else exit_when_idle
        args = ["run", str(self.pipeline_path), "--instance", f"{self.name}-{self.starts}"]
        for processor in self.processors:
            args += ["--processor", processor]
        if idle is not None:
            args += ["--exit-when-idle", str(idle)]
        with open(self.log, "ab") as out:
            out.write(f"\n--- {self.name} start {self.starts} ({time.strftime('%H:%M:%S')})\n".encode())
            out.flush()
            self.proc = subprocess.Popen(stylus_cmd(*args), env=stylus_env(self.bootstrap, **self.env),
                                         stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        self.starts += 1
        self.paused = False
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def _note(self, text: str) -> None:
        with open(self.log, "a") as out:
            out.write(f"\n--- {self.name}: {text} ({time.strftime('%H:%M:%S')})\n")

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            assert self.proc is not None
            self._note(f"signal {sig.name}")
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(30)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (a clean stop with a final checkpoint); SIGKILL if it has not ended within `timeout`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._note(f"no exit {timeout:g}s after SIGTERM")
                self.kill()
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout:g}s:\n{self.tail()}") from None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, chars: int = 4000) -> str:
        return f"--- {self.name} log ({self.log}), last part:\n{self.log_text()[-chars:]}"

    def says(self, text: str, *, since_start: bool = True) -> bool:
        """Whether the log has `text` (by default: since the last start)."""
        log = self.log_text()
        if since_start:
            log = log.rpartition(f"--- {self.name} start {self.starts - 1} ")[2]
        return text in log


def store_states(store_dir: Path) -> dict[int, dict[str, Any]]:
    """Partition -> user state of every RocksDB store under a processor's state directory
    (`<dir>/<pipeline>/<processor>`), read after the processes have exited."""
    out: dict[int, dict[str, Any]] = {}
    if not store_dir.is_dir():
        return out
    for path in sorted(store_dir.iterdir()):
        if not (path / "CURRENT").exists():
            continue
        store = PartitionStore(RocksKV(path))
        try:
            out[int(path.name.rsplit("-", 1)[1])] = dict(store.state.items())
        finally:
            store.close()
    return out


def stored_offsets(store_dir: Path) -> dict[int, int | None]:
    """Partition -> the next input offset saved beside the state."""
    out: dict[int, int | None] = {}
    if not store_dir.is_dir():
        return out
    for path in sorted(store_dir.iterdir()):
        if (path / "CURRENT").exists():
            store = PartitionStore(RocksKV(path))
            try:
                out[int(path.name.rsplit("-", 1)[1])] = store.stored_offset()
            finally:
                store.close()
    return out


#: the group's coordinator is not ready yet (a fresh broker loads __consumer_offsets) or moves: ask again
_COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                 KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._WAIT_COORD,
                                 KafkaError._TIMED_OUT, KafkaError._TRANSPORT})


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, int]:
    """The group's committed offset per partition (-1001 when none), asked again while the group's coordinator is
    not ready (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...: retriable errors) until `timeout`."""
    deadline = time.monotonic() + timeout
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "client.id": f"chaos-probe-{uuid.uuid4().hex[:6]}", "log_level": 2})
    try:
        while True:
            try:
                tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException as exc:
                err = exc.args[0]
                if not (err.retriable() or err.code() in _COORDINATOR_MOVING) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def topic_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Partition -> (log start, end) offsets."""
    return {p: ends for (_, p), ends in end_offsets(bootstrap, [(topic, p) for p in range(partitions)]).items()}


def all_committed(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    ends = topic_ends(bootstrap, topic, partitions)
    done = group_offsets(bootstrap, group, topic, partitions)
    return all(done[p] == ends[p][1] for p in range(partitions))


def unique_suffix() -> str:
    return uuid.uuid4().hex[:6]

