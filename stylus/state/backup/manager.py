"""A worker's backups: schedule them after checkpoints, upload in the background, restore on assignment.

Threading: the RocksDB checkpoint (hard links of the live database, taken right after a stylus
checkpoint, so it holds state and offsets of the same moment) is made on the worker thread; the upload
runs on one background thread. At most one upload round is in flight per worker: a round that falls due
while the previous one still runs is skipped, so a slow or hung target costs nothing but staleness.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from rocksdict import AccessType, Checkpoint, Options, Rdict

from stylus.config.model import BackupSpec, Pipeline
from stylus.state.backup.repository import HashCache, Manifest, PartitionBackups
from stylus.state.backup.target import BackupTarget, target_for
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore

log = logging.getLogger(__name__)

OFFSET_KEY = next(iter(PartitionStore.offset_change(0)))  # where a store keeps its next input offset


class StoreOwner(Protocol):
    """A partition with its store (a worker's PartitionTask): what a backup round copies."""

    @property
    def key(self) -> tuple[str, int]: ...

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def store(self) -> Any: ...


@dataclass
class _Job:
    key: tuple[str, int]
    offset: int | None
    path: Path


PIN_META = "restored_backup"  # written by `stylus backup restore`: this local state was chosen by hand
PIN_KEY = next(iter(PartitionStore.meta_change(PIN_META, 0)))


def local_offset(store_path: Path) -> int | None:
    """The next input offset saved in a local store, or None when there is no usable store."""
    return local_state(store_path)[0]


def local_state(store_path: Path) -> tuple[int | None, dict[str, Any] | None]:
    """(next input offset, pin) of a local store, read without locking it; (None, None) when unusable."""
    if not (store_path / "CURRENT").exists():
        return None, None
    options = Options(raw_mode=True)
    try:
        db = Rdict(str(store_path), options, access_type=AccessType.read_only())
    except Exception as exc:  # a damaged local store is as good as none: the backup replaces it
        log.warning("local state %s cannot be read (%s); treating it as missing", store_path, exc)
        return None, None
    try:
        raw = db.get(OFFSET_KEY)
        pin = db.get(PIN_KEY)
        return (None if raw is None else int(struct.unpack(">q", bytes(raw))[0]),
                None if pin is None else orjson.loads(bytes(pin)))
    finally:
        db.close()


def pin_restored(store_path: Path, manifest: Manifest) -> None:
    """Mark a store restored by hand, so the worker keeps it instead of restoring a newer backup."""
    store = PartitionStore(RocksKV(store_path))
    try:
        store.kv.write(PartitionStore.meta_change(PIN_META, {"id": manifest.id, "offset": manifest.offset}))
    finally:
        store.close()


class BackupManager:
    """Backups of one processor's partitions, owned by its worker."""

    def __init__(self, pipeline: Pipeline, processor: str, spec: BackupSpec, state_dir: str | Path,
                 *, target: BackupTarget | None = None, restore_threads: int = 4) -> None:
        self.pipeline = pipeline.pipeline
        self.processor = processor
        self.spec = spec
        self.target = target or target_for(spec.uri, timeout=spec.timeout)
        self.staging_root = Path(state_dir) / ".backup-staging" / self.pipeline / processor / uuid.uuid4().hex[:8]
        self.restore_threads = restore_threads
        self.hashes: dict[tuple[str, int], HashCache] = {}  # per partition: SST names repeat across DBs
        self.next_due = time.monotonic() + spec.interval
        self.backed_offsets: dict[tuple[str, int], int | None] = {}
        self._thread: threading.Thread | None = None
        self._repos: dict[tuple[str, int], PartitionBackups] = {}
        # counters (read by tests, logs and metrics)
        self.rounds = 0
        self.completed = 0  # partition backups written
        self.failures = 0  # partition backups that failed
        self.skipped_busy = 0  # rounds skipped because the previous upload was still running
        self.sent_bytes = 0
        self.restores = 0
        self.last_error: str | None = None
        self.last_success: float | None = None

    @classmethod
    def for_worker(cls, pipeline: Pipeline, processor: str) -> BackupManager | None:
        spec = pipeline.processors[processor]
        if spec.state.backup is None or not spec.stateful:
            return None
        return cls(pipeline, processor, spec.state.backup, spec.state.dir)

    def partition(self, topic: str, partition: int) -> PartitionBackups:
        repo = self._repos.get((topic, partition))
        if repo is None:
            repo = self._repos[(topic, partition)] = PartitionBackups(self.target, self.pipeline, self.processor,
                                                                      topic, partition)
        return repo

    # ------------------------------------------------------------------ restore (worker thread)
    def restore_if_newer(self, topic: str, partition: int, store_path: Path, committed: int | None) -> bool:
        """Before a store opens: replace missing or older local state by the newest usable backup.

        The group's committed offset decides first: local state at or past it is current (no backup can be
        newer), so a normal restart never waits on the target; and with no committed offset at all (None)
        the backups belong to an earlier life of the group and are left alone."""
        local, pin = local_state(store_path)
        repo = self.partition(topic, partition)
        if pin is not None and local is not None and pin.get("offset") == local:
            log.info("%s: local state of %s was restored from backup %s by hand (offset %s); keeping it",
                     self.processor, repo.label, pin.get("id"), local)
            return False
        if committed is None or (local is not None and local >= committed):
            return False
        started = time.monotonic()
        try:
            newest = repo.newest()
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("%s: cannot read backups of %s (%s); opening local state (offset %s)", self.processor,
                        repo.label, exc, local)
            return False
        if newest is None or (local is not None and (newest.offset or 0) <= local):
            return False
        log.info("%s: local state of %s is %s; restoring backup %s (offset %s, %.1f MB)", self.processor,
                 repo.label, "missing" if local is None else f"at offset {local}", newest.id, newest.offset,
                 newest.size / 1e6)
        try:
            restored = repo.restore(store_path, threads=self.restore_threads)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("%s: restoring %s failed (%s); opening local state (offset %s)", self.processor, repo.label,
                      exc, local)
            return False
        if restored is None:
            return False
        self.restores += 1
        self.backed_offsets[(topic, partition)] = restored.offset
        log.info("%s: restored %s to offset %s in %.2fs", self.processor, repo.label, restored.offset,
                 time.monotonic() - started)
        return True

    # ------------------------------------------------------------------ backup (worker thread)
    def after_checkpoint(self, tasks: Iterable[StoreOwner]) -> bool:
        """Called right after a checkpoint; starts an upload round when one is due. True if started."""
        now = time.monotonic()
        if now < self.next_due:
            return False
        self.next_due = now + self.spec.interval
        if self._thread is not None and self._thread.is_alive():
            self.skipped_busy += 1
            log.warning("%s: backup round skipped: the previous upload to %s is still running", self.processor,
                        self.target.uri)
            return False
        jobs = []
        for task in tasks:
            store = task.store
            # Writes buffered since the checkpoint (dirty state: processing goes on while checkpoints
            # overlap it) never reach RocksDB outside a checkpoint, so the database holds the last saved
            # state and offset together; only a checkpoint caught between stage and apply is skipped.
            if store is None or not isinstance(store.kv, RocksKV) or store.staged() is not None:
                continue
            offset = store.stored_offset()
            if offset is None or self.backed_offsets.get(task.key, -1) == offset:
                continue
            path = self.staging_root / f"{task.topic}-{task.partition}-{uuid.uuid4().hex[:8]}"
            path.parent.mkdir(parents=True, exist_ok=True)
            Checkpoint(store.kv.db).create_checkpoint(str(path))
            jobs.append(_Job(task.key, offset, path))
        if not jobs:
            return False
        self.rounds += 1
        self._thread = threading.Thread(target=self._upload, args=(jobs,), name=f"backup-{self.processor}",
                                        daemon=True)
        self._thread.start()
        return True

    def _upload(self, jobs: list[_Job]) -> None:
        for job in jobs:
            repo = self.partition(*job.key)
            started = time.monotonic()
            try:
                result = repo.upload(job.path, job.offset, keep=self.spec.keep,
                                     hashes=self.hashes.setdefault(job.key, HashCache()))
            except Exception as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: backup of %s to %s failed (%s); retrying at the next interval", self.processor,
                            repo.label, self.target.uri, self.last_error)
            else:
                self.completed += 1
                self.sent_bytes += result.sent_bytes
                self.backed_offsets[job.key] = job.offset
                self.last_success = time.time()
                log.info("%s: backed up %s at offset %s as %s: sent %d of %d files (%.1f of %.1f MB) in %.2fs",
                         self.processor, repo.label, job.offset, result.manifest.id, result.sent_files,
                         len(result.manifest.files), result.sent_bytes / 1e6, result.manifest.size / 1e6,
                         time.monotonic() - started)
            finally:
                shutil.rmtree(job.path, ignore_errors=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the upload in flight; True when none is running any more."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def close(self, timeout: float = 10.0) -> None:
        if not self.wait(timeout):
            log.warning("%s: leaving an unfinished backup upload behind", self.processor)
            return
        shutil.rmtree(self.staging_root, ignore_errors=True)
