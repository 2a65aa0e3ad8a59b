"""Issue 6 benchmark: backfill on Spark vs streaming replay of the same records.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.backfill --records 1000000 [--rounds 3] [--extras]
                                                                  [--source kafka|archive|both]
    .venv/bin/python -m bench.backfill --records 1000000 --slot 4

Runs its own embedded broker. Processor: tests.apps.counting:WordCount (stateful, one output per record),
4 input partitions, 10,000 distinct keys. Both the stream and the backfill write their 1M outputs to a
Kafka topic, so they do the same work. Each round runs the streaming replay, then a backfill in a fresh
process (a new Spark session, as `stylus backfill` gets): its first backfill (cold: Python workers start
inside it) and the same again on warm workers. A backfill is timed end to end (from the call into planning
to the results back on the driver) and from its first to its last processed record (as the stream is
timed); only the session start (the JVM) is not counted. CPU: the stream's process, the backfill's whole
process tree (driver, JVM, Python daemon and workers); the broker's separately. `--extras`: `local[1]`
and the two ways into a DataFrame (a Python data source vs mapInArrow over planned ranges). `--slot N`: no
Spark and no stream; one task's work (the units of one of two slots, half the input) N times, each in a fresh
process, with what a task costs per record: CPU (and the part of it on the task's own thread), kernel time,
page faults, and its peak RSS. `--source archive`: the backfill (and each slot) reads the same records from a
Parquet archive of the topic (100,000-record files, as the archiver writes by default) instead of Kafka; the
stream still replays them from Kafka. `--source both`: after each stream, one session from each, in alternating
order (slots alternate too), so both are compared with the same stream.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import BatchMarks  # noqa: E402
from stylus.archive import write_segment  # noqa: E402
from stylus.backfill.bounds import parse_bound  # noqa: E402
from stylus.backfill.job import plan_for, run_plan  # noqa: E402
from stylus.backfill.outputs import OutputTarget  # noqa: E402
from stylus.backfill.plan import Plan, Unit  # noqa: E402
from stylus.backfill.read import read_unit  # noqa: E402
from stylus.backfill.session import spark_session  # noqa: E402
from stylus.backfill.task import JobSpec, assign_slots, run_slot  # noqa: E402
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
    """A fresh consumer group reads all n records: seconds from the first to the last processed record (the
    worker marks both; the first batch, processed before the clock starts, is counted out pro rata)."""
    pipeline = load_pipeline(path)
    runner = PipelineRunner(pipeline, bootstrap, ["count"], exit_when_idle=0.5)
    threads = runner.start()
    worker = runner.workers["count"]
    assert worker.processed == 0, "the worker processed records before its clock was set up"
    marks = BatchMarks(worker, n)
    for thread in threads:
        thread.join()
    assert marks.finished.is_set() and not runner.errors, runner.errors
    return (marks.last - marks.first) * n / (n - marks.already)


def input_plan(path: Path, bootstrap: str, archive: str | None = None) -> Plan:
    """The backfill's plan of every record of the input: from Kafka, or from the archive at `archive`."""
    return plan_for(load_pipeline(path), "count", bootstrap, parse_bound(None, default="earliest"),
                    parse_bound(None, default="latest"), source="archive" if archive else "kafka", archive_root=archive)


def archive_input(bootstrap: str, tmp: Path, root: str, per_file: int = 100_000) -> None:
    """Copy the input topic into a Parquet archive at `root`, `per_file` records per file, in offset order."""
    for unit in input_plan(pipeline_file(tmp, "archive"), bootstrap).units:
        rows = list(read_unit(unit, bootstrap, None))
        for first in range(0, len(rows), per_file):
            write_segment(root, unit.topic, unit.partition, rows[first:first + per_file])


def bench_backfill(spark: Any, path: Path, bootstrap: str, archive: str | None = None) -> tuple[float, float, int]:
    """(end to end incl. planning and the final flush, first to last record processed by any task, records)."""
    pipeline = load_pipeline(path)
    started = time.monotonic()
    plan = input_plan(path, bootstrap, archive)
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


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and all its descendants (driver, Spark's JVM, the Python daemon, its workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, float]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append((int(entry), (int(fields[11]) + int(fields[12])) / tick))
    total, todo = (time.process_time() if pid == os.getpid() else 0.0), [pid]
    while todo:
        for child, cpu in children.get(todo.pop(), []):
            total += cpu
            todo.append(child)
    return total


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(args: argparse.Namespace) -> None:
    """One fresh session (a new JVM and Python daemon, as a `stylus backfill` gets): the first backfill of
    the session (cold: Python workers start inside it), then the same again on warm workers. Session
    start-up (the JVM) is timed but not counted. Prints one JSON line."""
    tmp, out = Path(args.tmp), dict[str, Any]()
    started = time.monotonic()
    spark = spark_session(args.master, f"bench-{args.tag}", preload=["tests.apps.counting"])
    out["session"] = time.monotonic() - started
    for run in (1, 2):
        path = pipeline_file(tmp, f"{args.tag}-{run}")
        cpu = tree_cpu(os.getpid())
        seconds, active, records = bench_backfill(spark, path, args.child, args.archive)
        assert records == args.records, (records, args.records)
        out[f"run{run}"] = {"e2e": seconds, "active": active, "cpu": tree_cpu(os.getpid()) - cpu, "load": _load()}
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


def slot_child(args: argparse.Namespace) -> None:
    """One slot of a 2-slot plan run in this process as a Spark task runs it (`run_slot`), without Spark."""
    path = pipeline_file(Path(args.tmp), args.tag)
    pipeline = load_pipeline(path)
    plan = input_plan(path, args.slot_child, args.archive)
    job = JobSpec(pipeline=pipeline.model_dump(mode="json", by_alias=True), processor="count",
                  bootstrap=args.slot_child, archive_root=args.archive, output=OutputTarget(kind="outputs"))
    units = [u.model_dump_json() for u in plan.units]
    slot = assign_slots([sum(c.size for c in u.chunks) for u in plan.units], 2)[0]
    rss_before = _rss_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here: planning's is not counted
    before, opened = resource.getrusage(resource.RUSAGE_SELF), time.time()
    thread_before = resource.getrusage(resource.RUSAGE_THREAD)  # the task's own thread (librdkafka's are the rest)
    summaries = [orjson.loads(row[4]) for row in run_slot(job, units, slot) if row[0] == "done"]
    thread_after = resource.getrusage(resource.RUSAGE_THREAD)
    after = resource.getrusage(resource.RUSAGE_SELF)
    n = sum(s["read"] for s in summaries)
    print("RESULT " + json.dumps({
        "records": n, "first_to_last": max(s["last"] for s in summaries) - min(s["first"] for s in summaries),
        "to_first": min(s["first"] for s in summaries) - opened,
        "cpu_us": (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / n * 1e6,
        "kernel_us": (after.ru_stime - before.ru_stime) / n * 1e6,
        "task_thread_us": (thread_after.ru_utime + thread_after.ru_stime - thread_before.ru_utime
                           - thread_before.ru_stime) / n * 1e6,
        "faults_per_record": (after.ru_minflt - before.ru_minflt) / n,
        "peak_rss_mb": _rss_kb("VmHWM") // 1024, "rss_before_mb": rss_before // 1024}), flush=True)


def _rss_kb(field: str) -> int:
    return int(Path("/proc/self/status").read_text().split(f"{field}:")[1].split()[0])


def bench_slots(bootstrap: str, tmp: Path, rounds: int, archives: dict[str, str | None]) -> None:
    """`--slot`: what one task costs per record, each run in a fresh process (as a cold Python worker); with
    several sources, their runs alternate."""
    results: dict[str, list[dict[str, Any]]] = {source: [] for source in archives}
    for r in range(1, rounds + 1):
        out = f"counts-slot{r}"  # Apache Kafka does not create the output topic on first produce
        create_topics(bootstrap, {out: load_pipeline(pipeline_file(tmp, f"slot{r}")).topics[out]})
        for source, archive in archives.items():
            x = child_result("--slot-child", bootstrap, "--tmp", str(tmp), "--tag", f"slot{r}",
                             *(("--archive", archive) if archive else ()))
            results[source].append(x)
            print(f"slot run {r} from {source}: {x['records']:,} records, first record after {x['to_first']:.3f}s, "
                  f"first to last {x['first_to_last']:.2f}s; per record "
                  f"{x['cpu_us']:.2f} us CPU (kernel {x['kernel_us']:.2f}; the task's thread "
                  f"{x['task_thread_us']:.2f}, the rest librdkafka's), {x['faults_per_record']:.3f} page faults; "
                  f"peak RSS {x['peak_rss_mb']} MB (before the slot {x['rss_before_mb']} MB) [load {_load()}]",
                  flush=True)
    for source, runs in results.items():
        for key in ("cpu_us", "kernel_us", "task_thread_us", "faults_per_record", "peak_rss_mb"):
            values = sorted(x[key] for x in runs)
            print(f"{source} {key}: median {values[len(values) // 2]:.3f} (range {values[0]:.3f}-{values[-1]:.3f})")


def child_result(*args: str) -> dict[str, Any]:
    """Run `python -m bench.backfill ARGS` in a fresh process and return the JSON of its RESULT line."""
    cmd = [sys.executable, "-m", "bench.backfill", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"backfill child failed ({done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def run_child(bootstrap: str, tmp: Path, tag: str, master: str, n: int, archive: str | None = None) -> dict[str, Any]:
    return child_result("--child", bootstrap, "--tmp", str(tmp), "--tag", tag, "--master", master, "--records", str(n),
                        *(("--archive", archive) if archive else ()))


def extras(bootstrap: str, tmp: Path, n: int, path: Path) -> None:
    """`local[1]` scaling and the two ways of getting records into a DataFrame (one session each)."""
    print(f"local[1]: {json.dumps(run_child(bootstrap, tmp, 'local1', 'local[1]', n))}", flush=True)
    spark = spark_session("local[2]", "bench-ingest")
    plan = input_plan(path, bootstrap)
    for way, secs in bench_ingest(spark, plan).items():
        print(f"into Spark via {way} (read + count/sum): {secs:.1f}s = {n / secs:,.0f} records/s", flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="stream, then a fresh backfill session, N times")
    parser.add_argument("--extras", action="store_true", help="also local[1] and the DataFrame ingest ways")
    parser.add_argument("--tmp", default="/tmp/stylus-bench-backfill")
    parser.add_argument("--source", choices=("kafka", "archive", "both"), default="kafka",
                        help="where the backfill reads the records (the stream always reads Kafka); both: a session "
                             "of each after every stream, in alternating order")
    parser.add_argument("--archive", help=argparse.SUPPRESS)  # internal: the children's archive root
    parser.add_argument("--slot", type=int, default=0, help="instead: one task's work N times, fresh processes")
    parser.add_argument("--slot-child", help=argparse.SUPPRESS)  # internal: one slot against this bootstrap
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one session against this bootstrap
    parser.add_argument("--tag", default="x", help=argparse.SUPPRESS)
    parser.add_argument("--master", default="local[2]", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.slot_child:
        slot_child(args)
        return
    tmp = Path(args.tmp)
    shutil.rmtree(tmp, ignore_errors=True)  # state from an earlier run would resume mid-topic
    tmp.mkdir(parents=True)
    n = args.records
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap
        assert broker.process is not None
        create_topics(bootstrap, {t: s for t, s in load_pipeline(pipeline_file(tmp, "x")).topics.items()
                                  if t == "words"})
        started = time.monotonic()
        produce(bootstrap, n)
        print(f"produced {n} records in {time.monotonic() - started:.1f}s", flush=True)
        archive = str(tmp / "archive")
        archives = {source: (archive if source == "archive" else None)
                    for source in (("kafka", "archive") if args.source == "both" else (args.source,))}
        if "archive" in archives:
            started = time.monotonic()
            archive_input(bootstrap, tmp, archive)
            print(f"archived them to {archive} in {time.monotonic() - started:.1f}s", flush=True)
        if args.slot:
            bench_slots(bootstrap, tmp, args.slot, archives)
            return
        rows: list[dict[str, float]] = []
        for r in range(1, args.rounds + 1):  # interleaved: the neighbours' load hits both sides alike
            cpu, broker_cpu = time.process_time(), proc_cpu(broker.process.pid)
            stream_s = bench_stream(pipeline_file(tmp, f"stream{r}"), bootstrap, n)
            print(f"round {r} streaming replay (1 worker), first to last record: {stream_s:.2f}s = "
                  f"{n / stream_s:,.0f} records/s, CPU {time.process_time() - cpu:.1f}s "
                  f"(+ broker {proc_cpu(broker.process.pid) - broker_cpu:.1f}s) [load {_load()}]", flush=True)
            row = {"stream": stream_s}
            order = list(archives.items())
            for source, source_archive in order if r % 2 else order[::-1]:
                broker_cpu = proc_cpu(broker.process.pid)
                res = run_child(bootstrap, tmp, f"r{r}{source}", "local[2]", n, source_archive)
                broker_cpu = proc_cpu(broker.process.pid) - broker_cpu
                for run, label in ((1, "first backfill of the session (cold)"), (2, "same again (warm workers)")):
                    x = res[f"run{run}"]
                    row[f"{source} e2e{run}"], row[f"{source} active{run}"] = x["e2e"], x["active"]
                    print(f"round {r} backfill local[2] from {source}, {label}: end to end {x['e2e']:.2f}s = "
                          f"{n / x['e2e']:,.0f} records/s ({stream_s / x['e2e']:.2f}x streaming); first to last "
                          f"record {x['active']:.2f}s ({stream_s / x['active']:.2f}x); CPU {x['cpu']:.1f}s "
                          f"[load {x['load']}]", flush=True)
                print(f"round {r} (session start, not counted: {res['session']:.1f}s; broker CPU over both "
                      f"backfills {broker_cpu:.1f}s)", flush=True)
            rows.append(row)
        for source in archives:
            for key, label in (("e2e1", "cold end to end"), ("e2e2", "warm end to end"),
                               ("active1", "cold first to last"), ("active2", "warm first to last")):
                ratios = sorted(row["stream"] / row[f"{source} {key}"] for row in rows)
                print(f"from {source}, {label}: {' '.join(f'{x:.2f}x' for x in ratios)} "
                      f"(median {ratios[len(ratios) // 2]:.2f}x)")
        if args.extras:
            extras(bootstrap, tmp, n, pipeline_file(tmp, "ingest"))


if __name__ == "__main__":
    main()
