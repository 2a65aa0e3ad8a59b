"""The Spark session backfill runs on: `local[*]` unless a master URL is given."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stylus.config.model import Pipeline


def spark_session(master: str | None = None, app: str = "stylus-backfill", *,
                  conf: dict[str, str] | None = None, preload: Sequence[str] = ()) -> Any:
    """Get or create a session. Small shuffle partition count: backfill shuffles only monoid deltas.
    Python workers fork from `stylus.backfill.daemon`, which has imported the backfill's modules and
    `preload` (the processors' modules) once: the first backfill of a session does not wait for each
    worker's imports."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master or "local[*]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # our own progress bar (stylus.backfill.progress)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.python.daemon.module", "stylus.backfill.daemon")
    )
    if preload:
        builder = builder.config("spark.executorEnv.STYLUS_BACKFILL_PRELOAD", ",".join(preload))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _python() -> str:
    import sys

    return sys.executable


def processor_modules(pipeline: Pipeline, names: Sequence[str]) -> list[str]:
    """The modules of these processors' classes: what `spark_session(preload=...)` imports in the daemon."""
    return [pipeline.processors[n].class_.partition(":")[0] for n in names if n in pipeline.processors]
