"""Nexmark on Spark (`python -m bench.nexmark --spark ROUNDS`): every implementation's backfill, and the queries
translated to Spark SQL, over the same bids in Kafka, in one Spark session (`--master`, default `local[2]`).

- **compiled**: `stylus backfill`'s path (stylus.backfill.job: plan, then each task reads its Kafka ranges and runs
  the processor on the engine), for each processor of the implementation that reads the bids, writing Parquet.
  For q5 and q7 that is the first stage, which does all the per-bid work; the merging stage after it reads one
  candidates record per window and bid partition (a few dozen), and is left out.
- **spark-sql**: the SQL apps of pipelines/nexmark/ translated by hand to Spark SQL (`SPARK_SQL`: what a translator
  of this dialect would write: the window columns computed from `dateTime`, QUALIFY kept, which Spark 4 has), over
  the same Kafka ranges read the same way (a `mapInArrow` over the planned units, one Spark partition per unit),
  the JSON parsed in the JVM (`from_json`), written to Parquet. A finite range's last windows stay open on the
  stream; here the windows ending by the newest event time are kept, as the reference does.

Each is timed end to end (from planning to the last file written; the session start is not counted), warm (one
unmeasured run of q2 each first), `rounds` times, alternating; records/s = bids / seconds, and records per CPU
second of the whole process tree (this process, Spark's JVM, its Python workers). Rows are checked: the Spark SQL
rows of every query against `stylus.nexmark.reference` (q0 and q1 by count), the compiled rows by count where a
stage writes the query's rows.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.backfill import tree_cpu
from bench.nexmark import BID_TOPIC, PYTHON, QueryRun, with_batch
from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.plan import Plan, Unit
from stylus.backfill.read import read_unit
from stylus.backfill.session import spark_session
from stylus.config import load_pipeline
from stylus.nexmark import reference
from stylus.sql.expand import stages_of

BID_SCHEMA = "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, dateTime BIGINT, extra STRING"
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")

#: pipelines/nexmark/q*.sql in Spark SQL; `{watermark}`: the newest event time of the range
SPARK_SQL = {
    "q0": "SELECT auction, bidder, price, dateTime, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    "q5": """
        SELECT auction, COUNT(*) AS num, window_start, window_start + 10000 AS window_end
        FROM (SELECT auction, explode(array(dateTime - pmod(dateTime, 5000) - 5000,
                                            dateTime - pmod(dateTime, 5000))) AS window_start FROM bid)
        WHERE window_start + 10000 <= {watermark}
        GROUP BY auction, window_start
        QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY num DESC) = 1""",
    "q7": """
        SELECT auction, bidder, price, dateTime, extra, window_start, window_start + 10000 AS window_end
        FROM (SELECT *, dateTime - pmod(dateTime, 10000) AS window_start FROM bid)
        WHERE window_start + 10000 <= {watermark}
        GROUP BY auction, bidder, price, dateTime, extra, window_start
        QUALIFY RANK() OVER (PARTITION BY window_start ORDER BY price DESC) = 1""",
}


@dataclass
class SparkRun:
    way: str  # an implementation's name (compiled), or spark-sql
    query: str
    records: int
    seconds: float
    cpu: float
    rows: int
    exact: bool

    @property
    def per_s(self) -> float:
        return self.records / self.seconds

    @property
    def per_cpu(self) -> float:
        return self.records / self.cpu


def _unit_batches(unit_json: str, bootstrap: str) -> Iterator[pa.RecordBatch]:
    values: list[bytes | None] = []
    for msg in read_unit(Unit.model_validate_json(unit_json), bootstrap, None):
        values.append(msg.value())
        if len(values) >= 20_000:
            yield pa.RecordBatch.from_pydict({"value": values}, schema=pa.schema([("value", pa.binary())]))
            values = []
    if values:
        yield pa.RecordBatch.from_pydict({"value": values}, schema=pa.schema([("value", pa.binary())]))


def bid_frame(spark: Any, plan: Plan) -> Any:
    """The bids of the planned units as a DataFrame of their columns: read in Python tasks as the backfill reads
    them, parsed in the JVM."""
    from pyspark.sql import functions as F

    units = [u.model_dump_json() for u in plan.units]
    bootstrap = plan.bootstrap

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from _unit_batches(units[index], bootstrap)

    raw = spark.range(0, len(units), 1, len(units)).mapInArrow(read, "value binary")
    return raw.select(F.from_json(F.col("value").cast("string"), BID_SCHEMA).alias("b")).select("b.*")


def _rows(path: Path) -> list[dict[str, Any]]:
    table = pq.read_table(path)
    rows: list[dict[str, Any]] = table.to_pylist()
    for row in rows:
        for name, value in row.items():
            if not isinstance(value, int | str | float) and value is not None:  # DECIMAL: q1's price
                row[name] = float(value)
    return rows


def run_spark_sql(spark: Any, bootstrap: str, query: str, bids: list[Any], end: int, out: Path,
                  check: bool) -> SparkRun:
    shutil.rmtree(out, ignore_errors=True)
    cpu, started = tree_cpu(os.getpid()), time.monotonic()
    plan = plan_for(load_pipeline(PYTHON), "q0", bootstrap, EARLIEST, LATEST)  # stateless: chunked units
    bid_frame(spark, plan).createOrReplaceTempView("bid")
    spark.sql(SPARK_SQL[query].format(watermark=end)).write.mode("overwrite").parquet(str(out))
    seconds, cpu = time.monotonic() - started, tree_cpu(os.getpid()) - cpu
    count = pq.read_table(out, columns=[]).num_rows
    expected = reference.run(query, bids, watermark=end)
    exact = count == len(expected)
    if check and query not in ("q0", "q1"):  # q0 and q1, a row per bid, by count
        exact = reference.diff(query, _rows(out), expected) == ""
    return SparkRun("spark-sql", query, len(bids), seconds, cpu, count, exact)


def run_compiled(spark: Any, bootstrap: str, impl: str, query: str, spec: QueryRun, bids: list[Any], end: int,
                 out: Path) -> SparkRun:
    out.parent.mkdir(parents=True, exist_ok=True)
    path = spec.pipeline if spec.batch is None else with_batch(spec.pipeline, spec.batch, str(out.parent))
    pipeline = load_pipeline(path)
    names = [s for n in spec.processors or pipeline.topological_order() for s in stages_of(pipeline, n) or [n]]
    sources = [n for n in pipeline.topological_order() if n in names and BID_TOPIC in pipeline.processors[n].inputs]
    shutil.rmtree(out, ignore_errors=True)
    cpu, started = tree_cpu(os.getpid()), time.monotonic()
    records = emitted = 0
    for i, name in enumerate(sources):
        plan = plan_for(pipeline, name, bootstrap, EARLIEST, LATEST)
        result = run_plan(spark, pipeline, name, plan, OutputTarget(kind="parquet", path=str(out / str(i))))
        records += result.records
        emitted += sum(result.outputs.values())
    seconds, cpu = time.monotonic() - started, tree_cpu(os.getpid()) - cpu
    final = query not in reference.WINDOWED  # q5/q7: a first stage writes candidates, not the rows
    exact = records == len(bids) * len(sources) and (not final or emitted == len(reference.run(query, bids)))
    return SparkRun(impl, query, records, seconds, cpu, emitted, exact)


def bench_spark(bootstrap: str, impls: dict[str, dict[str, QueryRun]], queries: list[str], bids: list[Any], end: int,
                tmp: str, *, rounds: int, master: str, c2: bool = False) -> dict[str, Any]:
    """Every implementation's backfill and the Spark SQL of every query, `rounds` times; prints and returns the
    figures. `c2`: the JVM compiles with C2 too (a local backfill session stops at C1, which suits Python tasks;
    Spark SQL's generated code runs in the JVM)."""
    conf = {"spark.sql.shuffle.partitions": "2"}
    if c2:
        conf["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=4"  # after C1's flag: the last one wins
    spark = spark_session(master, "bench-nexmark", conf=conf)
    out = Path(tmp) / "spark"
    runs: list[SparkRun] = []
    try:
        for way in [*impls, "spark-sql"]:  # warm: the session's first jobs start Python workers, plan, compile
            if "q2" in impls.get(way, {}) or way == "spark-sql":
                (run_spark_sql(spark, bootstrap, "q2", bids, end, out, False) if way == "spark-sql" else
                 run_compiled(spark, bootstrap, way, "q2", impls[way]["q2"], bids, end, out))
        for rnd in range(rounds):
            for query in queries:
                for way in [*impls, "spark-sql"]:
                    if way == "spark-sql":
                        run = run_spark_sql(spark, bootstrap, query, bids, end, out, check=rnd == 0)
                    elif query in impls[way]:
                        run = run_compiled(spark, bootstrap, way, query, impls[way][query], bids, end, out)
                    else:
                        continue
                    runs.append(run)
                    print(f"  spark {query} {way:9} round {rnd + 1}: {run.per_s:,.0f} records/s ({run.seconds:.2f} s), "
                          f"{run.per_cpu:,.0f} records/CPU-s, {run.rows:,} rows{'' if run.exact else ' WRONG'}  "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        spark.stop()
    summary: dict[str, Any] = {}
    for query in queries:
        for way in [*impls, "spark-sql"]:
            mine = [r for r in runs if r.query == query and r.way == way]
            if mine:
                best = max(mine, key=lambda r: r.per_s)
                summary.setdefault(query, {})[way] = {
                    "records_per_s": best.per_s, "median_records_per_s": statistics.median(r.per_s for r in mine),
                    "records_per_cpu_s": max(r.per_cpu for r in mine), "seconds": best.seconds,
                    "exact": all(r.exact for r in mine)}
                print(f"spark {query} {way:9} {best.per_s:>10,.0f} records/s (median "
                      f"{summary[query][way]['median_records_per_s']:,.0f})  "
                      f"{summary[query][way]['records_per_cpu_s']:>10,.0f} records/CPU-s"
                      f"  {'exact' if summary[query][way]['exact'] else 'WRONG'}")
    if not all(r.exact for r in runs):
        print("  SPARK ROWS WRONG", flush=True)
    return summary
