"""One partition's backups on a target: content-addressed blobs plus one manifest per backup.

Layout under `{pipeline}/{processor}/{topic}-{partition}/`:
    blobs/<sha256>           a file of a RocksDB checkpoint, named by its content
    manifests/<id>.json      partition, offset, files (name -> blob, size), time; id sorts by (offset, time)
A file whose blob is already there is not sent again (SST files never change, so most are shared by
consecutive backups). A manifest is written last: a backup without one does not exist for readers.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from stylus.state.backup.target import BackupTarget, BackupTargetError

log = logging.getLogger(__name__)

Progress = Callable[[int], None]  # called with the number of bytes just transferred


class FileEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    blob: str  # sha256 hex of the content
    size: int


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    format: int = 1
    id: str
    pipeline: str
    processor: str
    topic: str
    partition: int
    offset: int | None  # next input offset stored in the backed-up state
    created_ms: int
    files: tuple[FileEntry, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class UnusableBackup(Exception):
    """A backup that cannot be restored: unreadable manifest, missing blob, bad checksum."""


@dataclass
class UploadResult:
    manifest: Manifest
    sent_files: int
    sent_bytes: int
    deleted_backups: list[str] = field(default_factory=list)
    deleted_blobs: int = 0


def partition_prefix(pipeline: str, processor: str, topic: str, partition: int) -> str:
    return f"{pipeline}/{processor}/{topic}-{partition}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def make_id(offset: int | None, created_ms: int) -> str:
    return f"{max(offset or 0, 0):019d}-{created_ms:013d}-{uuid.uuid4().hex[:6]}"


class HashCache:
    """sha256 of immutable RocksDB files (SST, blob) by (name, size, inode, mtime): a checkpoint hard-links
    them, so the next backup finds them here instead of reading gigabytes again."""

    IMMUTABLE = (".sst", ".blob")

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int, int], str] = {}

    def sha256(self, path: Path) -> str:
        if not path.name.endswith(self.IMMUTABLE):
            return sha256_file(path)
        st = path.stat()
        key = (path.name, st.st_size, st.st_ino, st.st_mtime_ns)
        digest = self._known.get(key)
        if digest is None:
            digest = self._known[key] = sha256_file(path)
        return digest


class PartitionBackups:
    """Backups of one input partition on one target."""

    def __init__(self, target: BackupTarget, pipeline: str, processor: str, topic: str, partition: int) -> None:
        self.target = target
        self.pipeline = pipeline
        self.processor = processor
        self.topic = topic
        self.partition = partition
        self.prefix = partition_prefix(pipeline, processor, topic, partition)
        self._manifests: dict[str, Manifest] = {}  # manifests never change once written

    @property
    def label(self) -> str:
        return f"{self.topic}[{self.partition}]"

    # ------------------------------------------------------------------ reading
    def manifest_ids(self) -> list[str]:
        """Backup ids, newest first."""
        names = self.target.list(f"{self.prefix}/manifests")
        return sorted((n[: -len(".json")] for n in names if n.endswith(".json")), reverse=True)

    def manifest(self, backup_id: str) -> Manifest:
        cached = self._manifests.get(backup_id)
        if cached is not None:
            return cached
        try:
            raw = self.target.get_bytes(f"{self.prefix}/manifests/{backup_id}.json")
        except BackupTargetError as exc:
            raise UnusableBackup(f"manifest unreadable: {exc}") from exc
        try:
            manifest = Manifest.model_validate_json(raw)
        except ValidationError as exc:
            raise UnusableBackup(f"manifest is not valid: {exc.errors()[0]['msg']}") from exc
        if (manifest.topic, manifest.partition, manifest.id) != (self.topic, self.partition, backup_id):
            raise UnusableBackup(f"manifest names {manifest.topic}[{manifest.partition}] {manifest.id}")
        self._manifests[backup_id] = manifest
        return manifest

    def manifests(self) -> list[Manifest]:
        """Readable manifests, newest first (unreadable ones are logged and left out)."""
        out = []
        for backup_id in self.manifest_ids():
            try:
                out.append(self.manifest(backup_id))
            except UnusableBackup as exc:
                log.warning("backup %s of %s is unusable (%s)", backup_id, self.label, exc)
        return out

    def newest(self) -> Manifest | None:
        """The newest backup whose manifest reads and whose blobs are all present with the right sizes."""
        blobs: dict[str, int] | None = None
        for backup_id in self.manifest_ids():
            try:
                manifest = self.manifest(backup_id)
                blobs = self.target.list(f"{self.prefix}/blobs") if blobs is None else blobs
                _check_present(manifest, blobs)
                return manifest
            except UnusableBackup as exc:
                log.warning("backup %s of %s is unusable (%s); trying the previous one", backup_id, self.label, exc)
        return None

    # ------------------------------------------------------------------ writing
    def upload(self, checkpoint_dir: Path, offset: int | None, *, keep: int, hashes: HashCache | None = None,
               progress: Progress | None = None) -> UploadResult:
        """Send the files of a RocksDB checkpoint that the target lacks, then its manifest, then prune."""
        hashes = hashes or HashCache()
        files = sorted(p for p in checkpoint_dir.iterdir() if p.is_file())
        entries = [FileEntry(name=p.name, blob=hashes.sha256(p), size=p.stat().st_size) for p in files]
        present = self.target.list(f"{self.prefix}/blobs")
        sent_files = sent_bytes = 0
        for path, entry in zip(files, entries, strict=True):
            if present.get(entry.blob) == entry.size:
                continue
            self.target.put_file(f"{self.prefix}/blobs/{entry.blob}", path)
            present[entry.blob] = entry.size
            sent_files += 1
            sent_bytes += entry.size
            if progress is not None:
                progress(entry.size)
        created_ms = int(time.time() * 1000)
        manifest = Manifest(id=make_id(offset, created_ms), pipeline=self.pipeline, processor=self.processor,
                            topic=self.topic, partition=self.partition, offset=offset, created_ms=created_ms,
                            files=tuple(entries))
        self.target.put_bytes(f"{self.prefix}/manifests/{manifest.id}.json", manifest.model_dump_json().encode())
        self._manifests[manifest.id] = manifest
        result = UploadResult(manifest, sent_files, sent_bytes)
        self.prune(keep, result, present)
        return result

    def prune(self, keep: int, result: UploadResult | None = None, blobs: dict[str, int] | None = None) -> None:
        """Keep the newest `keep` manifests; delete the others and every blob no kept manifest uses."""
        ids = self.manifest_ids()
        for backup_id in ids[keep:]:
            self.target.delete(f"{self.prefix}/manifests/{backup_id}.json")
            self._manifests.pop(backup_id, None)
            if result is not None:
                result.deleted_backups.append(backup_id)
        referenced: set[str] = set()
        for backup_id in ids[:keep]:
            try:
                referenced.update(f.blob for f in self.manifest(backup_id).files)
            except UnusableBackup:
                continue  # a broken manifest protects nothing
        for blob in (blobs if blobs is not None else self.target.list(f"{self.prefix}/blobs")):
            if blob not in referenced:
                self.target.delete(f"{self.prefix}/blobs/{blob}")
                if result is not None:
                    result.deleted_blobs += 1

    def drop(self, backup_id: str) -> None:
        """Delete one backup's manifest (its blobs go at the next prune, unless a kept backup uses them)."""
        self.target.delete(f"{self.prefix}/manifests/{backup_id}.json")
        self._manifests.pop(backup_id, None)

    # ------------------------------------------------------------------ restoring
    def restore(self, dest: Path, *, backup_id: str | None = None, threads: int = 4,
                progress: Progress | None = None, on_start: Callable[[Manifest], None] | None = None
                ) -> Manifest | None:
        """Download the newest usable backup (or `backup_id`) into `dest`, replacing what is there.

        Files come in parallel and each one's sha256 is checked; a backup with a bad or missing file is
        skipped for the previous one. Returns the manifest restored, or None when no backup is usable."""
        ids = [backup_id] if backup_id is not None else self.manifest_ids()
        for candidate in ids:
            staging = dest.parent / f".restore-{dest.name}-{uuid.uuid4().hex[:8]}"
            try:
                manifest = self.manifest(candidate)
                if on_start is not None:
                    on_start(manifest)
                self._download(manifest, staging, threads, progress)
            except (UnusableBackup, BackupTargetError) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                log.warning("backup %s of %s is unusable (%s); trying the previous one", candidate, self.label, exc)
                continue
            _swap_in(staging, dest)
            log.info("restored %s from backup %s (offset %s, %d files, %.1f MB)", self.label, manifest.id,
                     manifest.offset, len(manifest.files), manifest.size / 1e6)
            return manifest
        return None

    def _download(self, manifest: Manifest, staging: Path, threads: int, progress: Progress | None) -> None:
        staging.mkdir(parents=True)

        def fetch(entry: FileEntry) -> None:
            digest = hashlib.sha256()
            size = 0
            with (staging / entry.name).open("wb") as fh:
                for chunk in self.target.open_read(f"{self.prefix}/blobs/{entry.blob}"):
                    digest.update(chunk)
                    fh.write(chunk)
                    size += len(chunk)
                    if progress is not None:
                        progress(len(chunk))
            if size != entry.size or digest.hexdigest() != entry.blob:
                raise UnusableBackup(f"file {entry.name}: checksum mismatch (blob {entry.blob[:12]}, "
                                     f"{size} bytes, expected {entry.size})")

        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="restore") as pool:
            for future in [pool.submit(fetch, e) for e in manifest.files]:
                future.result()


def _check_present(manifest: Manifest, blobs: dict[str, int]) -> None:
    for entry in manifest.files:
        if blobs.get(entry.blob) != entry.size:
            raise UnusableBackup(f"file {entry.name} (blob {entry.blob[:12]}) is missing or truncated")


def _swap_in(staging: Path, dest: Path) -> None:
    """Replace `dest` by `staging` with renames, so a crash leaves one whole database or the other."""
    old = dest.parent / f".old-{dest.name}-{uuid.uuid4().hex[:8]}"
    if dest.exists():
        os.rename(dest, old)
    os.rename(staging, dest)
    shutil.rmtree(old, ignore_errors=True)
