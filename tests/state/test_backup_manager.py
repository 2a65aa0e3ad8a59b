"""BackupManager rounds while processing goes on: a store with unsaved writes (checkpoints overlap
processing, so it is dirty at nearly every round) is backed up as of its last checkpoint."""

from __future__ import annotations

from pathlib import Path

from stylus.config import parse_pipeline
from stylus.core.task import PartitionTask
from stylus.state.backup.manager import BackupManager
from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import LocalTarget
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore


def test_a_dirty_store_is_backed_up_as_of_its_last_checkpoint(tmp_path: Path) -> None:
    pipeline = parse_pipeline(f"""
pipeline: mgr
topics: {{in: {{partitions: 1}}, out: {{partitions: 1}}}}
processors:
  p:
    class: tests.apps.counting:WordCount
    inputs: [in]
    outputs: [out]
    semantics: {{state: exactly_once, output: at_least_once}}
    state: {{dir: {tmp_path / 'state'}, backup: {{uri: 'file://{tmp_path / 'backups'}', interval: 1h}}}}
""")
    spec = pipeline.processors["p"].state.backup
    assert spec is not None
    target = LocalTarget("file://x", tmp_path / "backups")
    manager = BackupManager(pipeline, "p", spec, tmp_path / "state", target=target)
    store = PartitionStore(RocksKV(tmp_path / "state" / "in-0"))
    task = PartitionTask("in", 0, store)
    store.state["saved"] = 1
    store.save(42)  # a checkpoint
    store.state["unsaved"] = 2  # processing went on
    assert store.state.dirty
    manager.next_due = 0.0
    try:
        assert manager.after_checkpoint([task])
        assert manager.wait(30)
        assert manager.completed == 1 and manager.failures == 0
    finally:
        store.close()
        manager.close()
    repo = PartitionBackups(target, "mgr", "p", "in", 0)
    restored = repo.restore(tmp_path / "restored")
    assert restored is not None and restored.offset == 42
    back = PartitionStore(RocksKV(tmp_path / "restored"))
    try:
        assert dict(back.state.items()) == {"saved": 1} and back.stored_offset() == 42
    finally:
        back.close()
