"""The Spark session backfill runs on: `local[*]` unless a master URL is given."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stylus.config.model import Pipeline

#: prepended by Spark to `spark.driver.extraJavaOptions`, which stays the user's (spark-defaults.conf or `conf`)
DRIVER_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
#: A local master's JVM is also its executor, on the same cores as the Python workers, and does little per
#: record (records mode sends no rows through it), so the C2 compiler's work never pays back within a
#: backfill: its compiling takes CPU from the Python workers on the same cores, in records mode and in the
#: monoid path's shuffle alike (BENCHMARKS.md, "Backfill on Spark").
LOCAL_JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


def spark_session(master: str | None = None, app: str = "stylus-backfill", *,
                  conf: dict[str, str] | None = None, preload: Sequence[str] = ()) -> Any:
    """Get or create a session. Small shuffle partition count: backfill shuffles only monoid deltas.
    Python workers fork from `stylus.backfill.daemon`, which has imported the backfill's modules and
    `preload` (the processors' modules) once: the first backfill of a session does not wait for each
    worker's imports. On a local master the JVM compiles with C1 only (`LOCAL_JIT_OPTIONS`); a user's
    `spark.driver.extraJavaOptions` comes after it, so its own flags win."""
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
    for key, value in session_settings(master, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_settings(master: str | None, conf: dict[str, str] | None) -> dict[str, str]:
    """`conf`, plus C1-only compilation for a local master's JVM (prepended to any default Java options
    given: HotSpot takes the last of repeated flags, so the user's own still win)."""
    settings = dict(conf or {})
    if master is None or master.startswith("local"):
        given = settings.get(DRIVER_JAVA_OPTIONS)
        settings[DRIVER_JAVA_OPTIONS] = f"{LOCAL_JIT_OPTIONS} {given}" if given else LOCAL_JIT_OPTIONS
    return settings


def _python() -> str:
    import sys

    return sys.executable


def processor_modules(pipeline: Pipeline, names: Sequence[str]) -> list[str]:
    """The modules of these processors' classes: what `spark_session(preload=...)` imports in the daemon."""
    return [(pipeline.processors[n].class_ or "").partition(":")[0] for n in names
            if n in pipeline.processors and pipeline.processors[n].class_]
