"""Backup and restore throughput (MB/s) of one partition's RocksDB state, to file:// and to WebHDFS.

    .venv/bin/python bench/backup_throughput.py --mb 1024

Generates the state with rocksdict directly (random 1 KiB values, so lz4 cannot shrink it), takes a
RocksDB checkpoint, uploads it (full), uploads again after a small change (incremental), restores it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rocksdict import Checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stylus.state.backup.repository import HashCache, PartitionBackups
from stylus.state.backup.target import target_for
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.webhdfs_server import WebHdfsServer


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024, help="state size to generate")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="stylus-bench-backup-"))
    try:
        kv = RocksKV(work / "db")
        started = time.monotonic()
        value = 1024
        batch: dict[bytes, bytes | None] = {}
        for i in range(args.mb * 1024 * 1024 // value):
            batch[b"s" + f"key-{i:012d}".encode()] = os.urandom(value)
            if len(batch) >= 10_000:
                kv.write(batch)
                batch = {}
        kv.write(batch | PartitionStore.offset_change(1_000_000))
        kv.flush()
        kv.db.compact_range(None, None)
        print(f"generated {args.mb} MB of state in {time.monotonic() - started:.1f}s")
        cp = work / "cp1"
        started = time.monotonic()
        Checkpoint(kv.db).create_checkpoint(str(cp))
        size = dir_mb(cp)
        print(f"checkpoint: {size:.0f} MB in {time.monotonic() - started:.2f}s (hard links)")
        kv.write({b"s" + b"key-extra": b"1"} | PartitionStore.offset_change(1_000_001))
        kv.flush()
        cp2 = work / "cp2"
        Checkpoint(kv.db).create_checkpoint(str(cp2))
        kv.close()
        with WebHdfsServer(work / "hdfs") as server:
            for uri in (f"file://{work / 'backups'}", f"hdfs://127.0.0.1:{server.port}/stylus"):
                repo = PartitionBackups(target_for(uri, timeout=300), "bench", "proc", "in", 0)
                hashes = HashCache()  # as a worker keeps it: SST hashes are computed once
                t0 = time.monotonic()
                full = repo.upload(cp, 1_000_000, keep=3, hashes=hashes)
                t1 = time.monotonic()
                inc = repo.upload(cp2, 1_000_001, keep=3, hashes=hashes)
                t2 = time.monotonic()
                restored = repo.restore(work / "restored", threads=4)
                t3 = time.monotonic()
                assert restored is not None and restored.offset == 1_000_001
                scheme = uri.split(":")[0]
                print(f"{scheme:5} backup full: {full.sent_bytes / 1e6:.0f} MB in {t1 - t0:.1f}s = "
                      f"{full.sent_bytes / 1e6 / (t1 - t0):.0f} MB/s")
                print(f"{scheme:5} backup incremental: sent {inc.sent_files} of {len(inc.manifest.files)} files, "
                      f"{inc.sent_bytes / 1e6:.2f} MB in {t2 - t1:.2f}s")
                print(f"{scheme:5} restore (4 threads, sha256 checked): {restored.size / 1e6:.0f} MB in "
                      f"{t3 - t2:.1f}s = {restored.size / 1e6 / (t3 - t2):.0f} MB/s")
                shutil.rmtree(work / "restored")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
