"""The Python worker daemon of backfill sessions (`stylus.backfill.daemon`): it imports the backfill's
modules and the processor's before PySpark forks workers from it, so it must stay single-threaded (a
forked child gets no copy of other threads) and must survive a module that does not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, sys
import stylus.backfill.daemon as daemon
failed = daemon.preload()
print(json.dumps({"failed": failed, "threads": len(os.listdir("/proc/self/task")),
                  "loaded": [m for m in daemon.preload_modules() if m in sys.modules]}))
"""


def test_preload_imports_the_processor_module_and_starts_no_thread() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JE_ARROW_MALLOC_CONF", "OPENBLAS_NUM_THREADS")}
    env["STYLUS_BACKFILL_PRELOAD"] = "tests.apps.counting, no_such_module_for_stylus"
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["failed"] == ["no_such_module_for_stylus"]
    assert {"stylus.backfill.task", "pyarrow", "tests.apps.counting"} <= set(out["loaded"])
    assert out["threads"] == 1, "PySpark forks workers from the daemon: no thread may exist before the fork"


def test_backfill_workers_fork_from_the_stylus_daemon(spark: object) -> None:
    def probe(_: object) -> list[str]:
        return [" ".join(Path(f"/proc/{os.getppid()}/cmdline").read_text().split("\0"))]

    parent = spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()  # type: ignore[attr-defined]
    assert "stylus.backfill.daemon" in parent[0]
