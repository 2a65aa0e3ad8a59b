"""Backups of one partition's RocksDB: incremental upload, retention, restore, corrupt backups skipped.
Every test runs against file:// and against a real HDFS (a MiniDFSCluster, `mini_hdfs`) through WebHDFS and the
`hdfs` client, as in production."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import Checkpoint

from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import BackupTarget, LocalTarget, target_for
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore


@pytest.fixture(params=["file", "hdfs"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackupTarget]:
    if request.param == "file":
        yield target_for(f"file://{tmp_path / 'backups'}")
        return
    # asked for here, not in the signature: the file:// cases do not start a cluster
    yield target_for(request.getfixturevalue("hdfs_uri"), timeout=5)


def write_and_checkpoint(store: PartitionStore, path: Path, items: dict[str, int], offset: int) -> Path:
    """Save state + offset, flush to an SST (as a long-running store would), take a RocksDB checkpoint."""
    for key, value in items.items():
        store.state[key] = value
    store.save(offset)
    assert isinstance(store.kv, RocksKV)
    store.kv.flush()
    Checkpoint(store.kv.db).create_checkpoint(str(path))
    return path


def state_of(path: Path) -> tuple[int | None, dict[str, int]]:
    store = PartitionStore(RocksKV(path))
    try:
        return store.stored_offset(), dict(store.state.items())
    finally:
        store.close()


def test_incremental_upload_sends_only_new_files_and_restores(target: BackupTarget, tmp_path: Path) -> None:
    repo = PartitionBackups(target, "pipe", "counter", "words", 3)
    store = PartitionStore(RocksKV(tmp_path / "db"))
    first = repo.upload(write_and_checkpoint(store, tmp_path / "c1", {f"k{i}": i for i in range(1000)}, 1000),
                        1000, keep=5)
    assert first.sent_files == len(first.manifest.files)
    ssts = {f.blob for f in first.manifest.files if f.name.endswith(".sst")}
    assert ssts
    second = repo.upload(write_and_checkpoint(store, tmp_path / "c2", {"k1": -1, "new": 7}, 1002), 1002, keep=5)
    store.close()
    resent = {f.name for f in second.manifest.files if f.blob in ssts}
    assert resent and all(n.endswith(".sst") for n in resent)
    new_files = [f for f in second.manifest.files if f.blob not in {g.blob for g in first.manifest.files}]
    assert second.sent_files == len(new_files) < len(second.manifest.files)
    assert second.sent_bytes == sum(f.size for f in new_files) < second.manifest.size

    assert [m.id for m in repo.manifests()] == [second.manifest.id, first.manifest.id]
    assert repo.newest() == second.manifest
    restored = repo.restore(tmp_path / "restored")
    assert restored == second.manifest
    offset, state = state_of(tmp_path / "restored")
    expected = {f"k{i}": i for i in range(1000)} | {"k1": -1, "new": 7}
    assert (offset, state) == (1002, expected)
    older = repo.restore(tmp_path / "older", backup_id=first.manifest.id)
    assert older == first.manifest and state_of(tmp_path / "older")[0] == 1000


def test_retention_keeps_the_last_n_and_collects_unreferenced_files(target: BackupTarget, tmp_path: Path) -> None:
    repo = PartitionBackups(target, "pipe", "counter", "words", 0)
    store = PartitionStore(RocksKV(tmp_path / "db"))
    results = []
    for n in range(4):
        cp = write_and_checkpoint(store, tmp_path / f"c{n}", {f"r{n}-{i}": i for i in range(200)}, 200 * (n + 1))
        results.append(repo.upload(cp, 200 * (n + 1), keep=2))
    store.close()
    kept = [r.manifest.id for r in results[2:]][::-1]
    assert repo.manifest_ids() == kept
    assert results[2].deleted_backups == [results[0].manifest.id]
    assert results[3].deleted_backups == [results[1].manifest.id]
    referenced = {f.blob for r in results[2:] for f in r.manifest.files}
    stored = set(target.list(f"{repo.prefix}/blobs"))
    assert stored == referenced  # nothing unreferenced is left, nothing referenced is gone
    assert results[3].deleted_blobs > 0
    assert repo.restore(tmp_path / "restored") == results[3].manifest
    assert state_of(tmp_path / "restored")[0] == 800


def test_corrupt_or_partial_backup_is_skipped_for_the_previous_one(
        target: BackupTarget, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = PartitionBackups(target, "pipe", "counter", "words", 1)
    store = PartitionStore(RocksKV(tmp_path / "db"))
    good = repo.upload(write_and_checkpoint(store, tmp_path / "c1", {"a": 1}, 10), 10, keep=5).manifest
    bad = repo.upload(write_and_checkpoint(store, tmp_path / "c2", {"b": 2}, 20), 20, keep=5).manifest
    store.close()
    only_bad = [f for f in bad.files if f.blob not in {g.blob for g in good.files} and f.name.endswith(".sst")]
    assert only_bad
    blob_rel = f"{repo.prefix}/blobs/{only_bad[0].blob}"
    data = bytearray(target.get_bytes(blob_rel))
    data[len(data) // 2] ^= 0xFF  # same size, different content: only the checksum can tell
    target.put_bytes(blob_rel, bytes(data))
    with caplog.at_level(logging.WARNING):
        restored = repo.restore(tmp_path / "restored")
    assert restored == good
    assert state_of(tmp_path / "restored") == (10, {"a": 1})
    assert any(bad.id in r.message and "checksum mismatch" in r.message and "previous" in r.message
               for r in caplog.records)

    # a partial backup: a blob is gone. newest() notices without downloading anything
    target.delete(blob_rel)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert repo.newest() == good
    assert any(bad.id in r.message and "missing" in r.message for r in caplog.records)

    # a torn manifest is skipped too
    target.put_bytes(f"{repo.prefix}/manifests/{'9' * 19}-0000000000000-ffffff.json", b'{"format": 1, "id"')
    assert repo.newest() == good
    assert repo.restore(tmp_path / "again") == good


def test_restore_replaces_an_existing_store_whole(tmp_path: Path) -> None:
    target = LocalTarget("file://x", tmp_path / "backups")
    repo = PartitionBackups(target, "pipe", "counter", "words", 0)
    store = PartitionStore(RocksKV(tmp_path / "db"))
    repo.upload(write_and_checkpoint(store, tmp_path / "c1", {"a": 1}, 5), 5, keep=2)
    store.close()
    stale = PartitionStore(RocksKV(tmp_path / "local"))
    stale.state["stale"] = 1
    stale.save(3)
    stale.close()
    repo.restore(tmp_path / "local")
    assert state_of(tmp_path / "local") == (5, {"a": 1})
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
