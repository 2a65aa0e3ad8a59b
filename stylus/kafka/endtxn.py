"""EndTxn requests that take turns, across the threads and processes of one machine, per broker.

The embedded broker can wedge a partition's `read_committed` end for good when two transactions end at once
(docs/faults.md). A worker's own partitions end their transactions one at a time behind a thread lock; the
instances of a processor (or the processors of a pipeline) on one machine share a file lock per broker
address as well. The file lock is waited for a bounded time only: an instance frozen while holding it (a
SIGSTOPped zombie) must not stop the others' commits, so past the wait a commit goes ahead without its turn.
Kafka's coordinator has no such race; workers only take turns where the cluster shows aborted records.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

#: How long a commit waits for another process's EndTxn before it goes ahead anyway (an EndTxn takes 1-3 ms).
TURN_WAIT = 0.5
#: How long it waits for another thread of this process: longer, for a worker's partitions queue up together,
#: yet bounded, for a transactional call can hang inside librdkafka for up to its deadline (stylus/runtime/bounded.py)
THREAD_WAIT = 5.0


def turn_file(bootstrap: str) -> Path:
    """The lock file shared by every process of this machine that commits through `bootstrap`."""
    name = re.sub(r"[^A-Za-z0-9.-]+", "_", bootstrap)
    return Path(tempfile.gettempdir()) / f"stylus-endtxn-{name}.lock"


class EndTxnTurns:
    """A context manager: inside it, no other EndTxn of this process, and no other process of this machine using
    the same broker address, is in flight; unless the turn was not given within its bound (`wait` for another
    process, `THREAD_WAIT` for a call of this process that hangs), when the caller goes ahead anyway."""

    def __init__(self, bootstrap: str, wait: float = TURN_WAIT) -> None:
        self.path = turn_file(bootstrap)
        self.wait = wait
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._mine = threading.local()  # what the calling thread holds: entered from several threads

    def __enter__(self) -> EndTxnTurns:
        self._mine.thread = self._thread_lock.acquire(timeout=THREAD_WAIT)
        self._mine.file = self._file_turn() if self._mine.thread else False
        return self

    def _file_turn(self) -> bool:
        """The file lock, taken by the thread that holds the thread lock (flock is per open file)."""
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            deadline = time.monotonic() + self.wait
            while True:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        log.info("another process has held %s for %.1f s; ending this transaction without "
                                 "waiting for its turn", self.path, self.wait)
                        return False
                    time.sleep(0.001)
        except OSError as exc:  # no usable temp dir: the thread lock alone still orders this process
            log.debug("EndTxn turns across processes unavailable (%s)", exc)
            return False

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self._mine.file and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            if self._mine.thread:
                self._thread_lock.release()
            self._mine.thread = self._mine.file = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
