"""The Spark session backfill runs on: `local[*]` unless a master URL is given."""

from __future__ import annotations

import os
from typing import Any


def spark_session(master: str | None = None, app: str = "stylus-backfill", *,
                  conf: dict[str, str] | None = None) -> Any:
    """Get or create a session. Small shuffle partition count: backfill shuffles only monoid deltas."""
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
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _python() -> str:
    import sys

    return sys.executable
