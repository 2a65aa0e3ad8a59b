"""RocksDB state backups to file:// or WebHDFS targets, restore, and replay with output suppressed."""

from stylus.state.backup.manager import BackupManager
from stylus.state.backup.repository import Manifest, PartitionBackups, UnusableBackup
from stylus.state.backup.target import BackupTarget, BackupTargetError, LocalTarget, WebHdfsTarget, target_for

__all__ = [
    "BackupManager",
    "BackupTarget",
    "BackupTargetError",
    "LocalTarget",
    "Manifest",
    "PartitionBackups",
    "UnusableBackup",
    "WebHdfsTarget",
    "target_for",
]
