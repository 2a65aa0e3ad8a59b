"""Issue 6 benchmark: backfill on Spark vs streaming replay of the same records, executor scaling, and
the two ways into Spark (a Python data source vs mapInArrow over planned ranges).

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.backfill --records 1000000

Runs its own embedded broker. Processor: tests.apps.counting:WordCount (stateful, one output per record),
4 input partitions, 10,000 distinct keys. Both the stream and the backfill write their 1M outputs to a
Kafka topic, so they do the same work; Spark session start-up (4-7 s) is not counted. A backfill is timed
end to end (plan included) and from its first to its last processed record (as the stream is timed), twice
per master: the first backfill of the session and the same one again on warm Python workers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stylus.backfill.bounds import parse_bound  # noqa: E402
from stylus.backfill.job import plan_for, run_plan  # noqa: E402
from stylus.backfill.outputs import OutputTarget  # noqa: E402
from stylus.backfill.plan import Plan, Unit  # noqa: E402
from stylus.backfill.read import read_unit  # noqa: E402
from stylus.backfill.session import spark_session  # noqa: E402
from stylus.config import load_pipeline  # noqa: E402
from stylus.kafka.admin import create_topics  # noqa: E402
from stylus.kafka.broker import EmbeddedBroker  # noqa: E402
from stylus.runtime.runner import PipelineRunner  # noqa: E402

RECORD_SCHEMA = "topic string, partition int, offset bigint, timestamp bigint, key binary, value binary"


def pipeline_file(tmp: Path, tag: str) -> Path:
    path = tmp / f"bench-{tag}.yaml"
    path.write_text(json.dumps({
        "pipeline": f"bench-{tag}",
        "topics": {"words": {"partitions": 4}, f"counts-{tag}": {"partitions": 4}},
        "processors": {"count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"],
                                 "outputs": [f"counts-{tag}"], "state": {"dir": str(tmp / "state")}}},
    }))
    return path


def produce(bootstrap: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000, "partitioner": "murmur2_random"})
    for i in range(n):
        key = f"w{i % 10_000}"
        while True:
            try:
                producer.produce("words", b'{"w": "%s", "i": %d}' % (key.encode(), i), key.encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def bench_stream(path: Path, bootstrap: str, n: int) -> float:
    """A fresh consumer group reads all n records: seconds from the first to the last processed record."""
    pipeline = load_pipeline(path)
    runner = PipelineRunner(pipeline, bootstrap, ["count"], exit_when_idle=0.5)
    marks: dict[str, float] = {}

    def watch() -> None:
        while "last" not in marks:
            worker = runner.workers.get("count")
            done = worker.processed if worker else 0
            if done and "first" not in marks:
                marks["first"] = time.monotonic()
            if done >= n:
                marks["last"] = time.monotonic()
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    runner.run()
    watcher.join(5)
    return marks["last"] - marks["first"]


def _warm(batches: Any) -> Any:
    import stylus.backfill.task  # noqa: F401 - imports in the Python workers, as a first task would

    yield from batches


def warm_up(spark: Any) -> float:
    """The first job of a session starts the Python workers and imports (~10 s here): not counted."""
    parallelism = spark.sparkContext.defaultParallelism
    started = time.monotonic()
    spark.range(0, parallelism, 1, parallelism).mapInArrow(_warm, "id long").collect()
    return time.monotonic() - started


def bench_backfill(spark: Any, path: Path, bootstrap: str) -> tuple[float, float, int]:
    """(end to end incl. planning and the final flush, first to last record processed by any task, records)."""
    pipeline = load_pipeline(path)
    started = time.monotonic()
    plan = plan_for(pipeline, "count", bootstrap, parse_bound(None, default="earliest"),
                    parse_bound(None, default="latest"))
    result = run_plan(spark, pipeline, "count", plan, OutputTarget(kind="outputs"))
    return time.monotonic() - started, result.processing_seconds, result.records


def _arrow(msgs: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "topic": [m.topic() for m in msgs], "partition": [m.partition() for m in msgs],
        "offset": [m.offset() for m in msgs], "timestamp": [m.timestamp()[1] for m in msgs],
        "key": [m.key() for m in msgs], "value": [m.value() for m in msgs],
    }, schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                         ("timestamp", pa.int64()), ("key", pa.binary()), ("value", pa.binary())]))


def _unit_batches(unit_json: str, bootstrap: str) -> Any:
    batch: list[Any] = []
    for msg in read_unit(Unit.model_validate_json(unit_json), bootstrap, None):
        batch.append(msg)
        if len(batch) >= 20_000:
            yield _arrow(batch)
            batch = []
    if batch:
        yield _arrow(batch)


def bench_ingest(spark: Any, plan: Plan) -> dict[str, float]:
    """Records into a Spark DataFrame and aggregated: Python data source vs mapInArrow."""
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    units = [u.model_dump_json() for u in plan.units]
    bootstrap = plan.bootstrap

    class RangeReader(DataSourceReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.units = json.loads(options["units"])
            self.bootstrap = options["bootstrap"]

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(len(self.units))]

        def read(self, partition: Any) -> Any:
            yield from _unit_batches(self.units[partition.value], self.bootstrap)

    class KafkaRanges(DataSource):
        @classmethod
        def name(cls) -> str:
            return "stylus_kafka_ranges"

        def schema(self) -> str:
            return RECORD_SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return RangeReader(dict(self.options))

    spark.dataSource.register(KafkaRanges)
    out: dict[str, float] = {}
    agg = [F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")]
    started = time.monotonic()
    spark.read.format("stylus_kafka_ranges").option("units", json.dumps(units)) \
        .option("bootstrap", bootstrap).load().agg(*agg).collect()
    out["datasource"] = time.monotonic() - started

    def read_units(batches: Any) -> Any:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from _unit_batches(units[index], bootstrap)

    started = time.monotonic()
    spark.range(0, len(units), 1, len(units)).mapInArrow(read_units, RECORD_SCHEMA).agg(*agg).collect()
    out["mapInArrow"] = time.monotonic() - started
    return out


def _load() -> str:
    """The 1-minute load average: these 2 cores are shared, so every figure carries it."""
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tmp", default="/tmp/stylus-bench-backfill")
    args = parser.parse_args()
    tmp = Path(args.tmp)
    shutil.rmtree(tmp, ignore_errors=True)  # state from an earlier run would resume mid-topic
    tmp.mkdir(parents=True)
    n = args.records
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap
        create_topics(bootstrap, {t: s for t, s in load_pipeline(pipeline_file(tmp, "x")).topics.items()
                                  if t == "words"})
        started = time.monotonic()
        produce(bootstrap, n)
        print(f"produced {n} records in {time.monotonic() - started:.1f}s", flush=True)

        stream_s = bench_stream(pipeline_file(tmp, "stream"), bootstrap, n)
        print(f"streaming replay (stylus run, 1 worker), first to last record: {stream_s:.1f}s = "
              f"{n / stream_s:,.0f} records/s [load {_load()}]", flush=True)
        results = {"stream": stream_s}
        for master in ("local[2]", "local[1]"):
            spark = spark_session(master, f"bench-{master}")
            print(f"{master}: first job (Python workers start, imports) {warm_up(spark):.1f}s", flush=True)
            tag = master.replace("[", "").replace("]", "")
            for run in (1, 2):  # run 2: the same backfill again (new output topic) on the now warm workers
                path = pipeline_file(tmp, f"{tag}-{run}")
                seconds, active, records = bench_backfill(spark, path, bootstrap)
                assert records == n, (records, n)
                results[f"{master} run {run}"] = seconds
                print(f"backfill {master} run {run}: end to end {seconds:.1f}s = {n / seconds:,.0f} records/s "
                      f"({stream_s / seconds:.2f}x streaming); first to last record {active:.1f}s = "
                      f"{n / active:,.0f} records/s ({stream_s / active:.2f}x) [load {_load()}]", flush=True)
            if master == "local[2]":
                plan = plan_for(load_pipeline(path), "count", bootstrap, parse_bound(None, default="earliest"),
                                parse_bound(None, default="latest"))
                for way, secs in bench_ingest(spark, plan).items():
                    print(f"into Spark via {way} (read + count/sum): {secs:.1f}s = {n / secs:,.0f} records/s",
                          flush=True)
            spark.stop()


if __name__ == "__main__":
    main()
