"""PySpark's Python worker daemon with the backfill's modules imported once, before it forks.

PySpark starts one daemon per executor (`python -m <spark.python.daemon.module>`) and forks every Python
worker from it. The stock daemon imports nothing, so each worker of the first job of a session would pay
for its own imports (pyspark.worker, pyarrow, stylus, the processor's module), on the same cores as the
JVM's first job. Imported here, a forked worker starts warm.

PySpark forks only from a single-threaded daemon (a forked child gets no copy of other threads, so a
lock one of them held stays locked): the imports here start no thread. pyarrow's jemalloc background
thread and OpenBLAS's thread pool are switched off before they load; Spark runs one task per core anyway.

`STYLUS_BACKFILL_PRELOAD` (comma-separated modules, set by `spark_session(preload=...)` through
`spark.executorEnv`) adds the processor's own module. A module that fails to import is skipped here: the
task imports it again and reports the error where the user sees it.
"""

from __future__ import annotations

import importlib
import os

BASE_MODULES = ("pyspark.worker", "pyarrow", "pyarrow.ipc", "confluent_kafka", "stylus.backfill.task")
NO_THREADS = {"JE_ARROW_MALLOC_CONF": "background_thread:false", "OPENBLAS_NUM_THREADS": "1"}


def preload_modules() -> list[str]:
    extra = [m.strip() for m in os.environ.get("STYLUS_BACKFILL_PRELOAD", "").split(",") if m.strip()]
    return list(dict.fromkeys([*BASE_MODULES, *extra]))


def preload() -> list[str]:
    """Import the modules; returns those that failed (left to the task, which shows the error)."""
    for key, value in NO_THREADS.items():
        os.environ.setdefault(key, value)
    failed = []
    for name in preload_modules():
        try:
            importlib.import_module(name)
        except Exception:  # a broken processor module must not take the daemon (and every task) down
            failed.append(name)
    return failed


def main() -> None:
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
