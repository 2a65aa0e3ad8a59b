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

`--reader client|kafka-source|both`: who reads the Kafka ranges, each task with confluent-kafka (`client`, the
default) or Spark's own Kafka source (`kafka-source`, stylus/backfill/source.py); `both`: after each stream, one
session of each, in alternating order. Every backfill also reports records/s per core (records over the CPU
seconds of the backfill's process tree, and with the broker's CPU of that backfill added) and peak memory: the
process tree's RSS sampled every 20 ms (its peak), and the sum of each process's own peak RSS over the backfill
(VmHWM, reset when it starts; an upper bound: the peaks need not coincide), with the JVM's and the Python
workers' shares. `--no-stream` leaves out the streaming replays (ratios are then not printed).

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.backfill --records 1000000 --rounds 3 --reader both
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

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
from stylus.backfill.source import Reader  # noqa: E402
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


def bench_backfill(spark: Any, path: Path, bootstrap: str, archive: str | None = None,
                   reader: Reader = "client") -> tuple[float, float, int]:
    """(end to end incl. planning and the final flush, first to last record processed by any task, records)."""
    pipeline = load_pipeline(path)
    started = time.monotonic()
    plan = input_plan(path, bootstrap, archive)
    result = run_plan(spark, pipeline, "count", plan, OutputTarget(kind="outputs"), reader=reader)
    assert {task["reader"] for task in result.tasks} == {reader}
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


def _versus(stream: float, seconds: float) -> str:
    return f" ({stream / seconds:.2f}x streaming)" if stream else ""


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


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/status").read_text().split(f"{field}:")[1].split()[0])
    except (OSError, IndexError):
        return 0  # gone, or a kernel thread


def _kind(pid: int) -> str:
    """jvm | worker (PySpark's daemon and the Python workers it forks) | driver (this process) | other."""
    if pid == os.getpid():
        return "driver"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    return "jvm" if b"java" in cmd.split(b"\0")[0] else "worker" if b"python" in cmd else "other"


class TreeMemory:
    """Peak memory of this process tree over a backfill: the tree's RSS sampled every `interval` s (its peak),
    and each process's own peak RSS (VmHWM, reset through /proc/PID/clear_refs when the backfill starts;
    a worker forked during the backfill starts its peak then). The sampling thread reads /proc only, in the
    driver, which waits on the JVM meanwhile; it finds the tree's processes again every 25 samples, and its own
    CPU (`cpu`) is left out of the backfill's."""

    PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

    def __init__(self, interval: float = 0.02) -> None:
        self.interval, self.peak_kb, self.cpu = interval, 0, 0.0
        self.stop = threading.Event()
        for pid in tree_pids(os.getpid()):
            with contextlib.suppress(OSError):  # a process that has just ended
                Path(f"/proc/{pid}/clear_refs").write_text("5")
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        pids: list[int] = []
        samples = 0
        while not self.stop.is_set():
            if samples % 25 == 0:
                pids = tree_pids(os.getpid())
            samples += 1
            total = 0
            for pid in pids:
                with contextlib.suppress(OSError, IndexError, ValueError):
                    total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * self.PAGE_KB
            self.peak_kb = max(self.peak_kb, total)
            self.stop.wait(self.interval)
        self.cpu = time.thread_time()

    def finish(self) -> dict[str, float]:
        """MB: `tree_peak` (sampled), `sum_of_peaks`, and the per-kind sums of peaks and largest peak."""
        self.stop.set()
        self.thread.join()
        out: dict[str, float] = {"tree_peak": self.peak_kb / 1024, "sum_of_peaks": 0.0}
        for pid in tree_pids(os.getpid()):
            kb = _status_kb(pid, "VmHWM") / 1024
            kind = _kind(pid)
            out["sum_of_peaks"] += kb
            out[kind] = out.get(kind, 0.0) + kb
            out[f"max_{kind}"] = max(out.get(f"max_{kind}", 0.0), kb)
        return out


def child(args: argparse.Namespace) -> None:
    """One fresh session (a new JVM and Python daemon, as a `stylus backfill` gets): the first backfill of
    the session (cold: Python workers start inside it), then the same again on warm workers. Session
    start-up (the JVM) is timed but not counted. Prints one JSON line."""
    tmp, out = Path(args.tmp), dict[str, Any]()
    started = time.monotonic()
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    spark = spark_session(args.master, f"bench-{args.tag}", conf=conf, preload=["tests.apps.counting"])
    out["session"] = time.monotonic() - started
    for run in (1, 2):
        path = pipeline_file(tmp, f"{args.tag}-{run}")
        cpu = tree_cpu(os.getpid())
        broker_cpu = proc_cpu(args.broker_pid) if args.broker_pid else 0.0
        memory = TreeMemory()
        seconds, active, records = bench_backfill(spark, path, args.child, args.archive, args.reader)
        assert records == args.records, (records, args.records)
        cpu = tree_cpu(os.getpid()) - cpu
        peaks = memory.finish()
        out[f"run{run}"] = {"e2e": seconds, "active": active, "cpu": cpu - memory.cpu, "load": _load(),
                            "sampler_cpu": memory.cpu, "memory": peaks,
                            "broker_cpu": proc_cpu(args.broker_pid) - broker_cpu if args.broker_pid else 0.0}
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


def run_child(bootstrap: str, tmp: Path, tag: str, master: str, n: int, archive: str | None = None,
              reader: Reader = "client", broker_pid: int = 0, spark_conf: tuple[str, ...] = ()) -> dict[str, Any]:
    return child_result("--child", bootstrap, "--tmp", str(tmp), "--tag", tag, "--master", master, "--records", str(n),
                        "--reader", reader, "--broker-pid", str(broker_pid),
                        *(("--archive", archive) if archive else ()),
                        *(arg for item in spark_conf for arg in ("--spark-conf", item)))


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
    parser.add_argument("--reader", choices=("client", "kafka-source", "both"), default="client",
                        help="who reads the Kafka ranges; both: a session of each after every stream, alternating")
    parser.add_argument("--no-stream", action="store_true", help="no streaming replays (no ratios)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the backfill sessions (repeatable)")
    parser.add_argument("--broker-pid", type=int, default=0, help=argparse.SUPPRESS)  # internal: its CPU per run
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
        if args.reader != "client" and args.source != "kafka":
            raise SystemExit("--reader kafka-source|both reads Kafka only: use it with --source kafka")
        archives = {source: (archive if source == "archive" else None)
                    for source in (("kafka", "archive") if args.source == "both" else (args.source,))}
        # what each session of a round runs: label -> (archive root or None, reader)
        variants: dict[str, tuple[str | None, Reader]] = (
            {"client": (None, "client"), "kafka-source": (None, "kafka-source")} if args.reader == "both"
            else {source if args.reader == "client" else args.reader: (root, cast("Reader", args.reader))
                  for source, root in archives.items()})
        if "archive" in archives:
            started = time.monotonic()
            archive_input(bootstrap, tmp, archive)
            print(f"archived them to {archive} in {time.monotonic() - started:.1f}s", flush=True)
        if args.slot:
            bench_slots(bootstrap, tmp, args.slot, archives)
            return
        rows: list[dict[str, float]] = []
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in variants}
        for r in range(1, args.rounds + 1):  # interleaved: the neighbours' load hits both sides alike
            row = {"stream": 0.0}
            if not args.no_stream:
                cpu, broker_cpu = time.process_time(), proc_cpu(broker.process.pid)
                stream_s = row["stream"] = bench_stream(pipeline_file(tmp, f"stream{r}"), bootstrap, n)
                print(f"round {r} streaming replay (1 worker), first to last record: {stream_s:.2f}s = "
                      f"{n / stream_s:,.0f} records/s, CPU {time.process_time() - cpu:.1f}s "
                      f"(+ broker {proc_cpu(broker.process.pid) - broker_cpu:.1f}s) [load {_load()}]", flush=True)
            order = list(variants.items())
            for label, (source_archive, reader) in order if r % 2 else order[::-1]:
                res = run_child(bootstrap, tmp, f"r{r}{label}", "local[2]", n, source_archive, reader,
                                broker.process.pid, tuple(args.spark_conf))
                for run, what in ((1, "first backfill of the session (cold)"), (2, "same again (warm workers)")):
                    x = res[f"run{run}"]
                    runs[label].append({**x, "run": run})
                    row[f"{label} e2e{run}"], row[f"{label} active{run}"] = x["e2e"], x["active"]
                    mem = x["memory"]
                    print(f"round {r} backfill local[2] {label}, {what}: end to end {x['e2e']:.2f}s = "
                          f"{n / x['e2e']:,.0f} records/s{_versus(row['stream'], x['e2e'])}; first to last record "
                          f"{x['active']:.2f}s{_versus(row['stream'], x['active'])}; CPU {x['cpu']:.2f}s = "
                          f"{n / x['cpu']:,.0f} records/s per core (with the broker's {x['broker_cpu']:.2f}s: "
                          f"{n / (x['cpu'] + x['broker_cpu']):,.0f}); peak RSS of the tree {mem['tree_peak']:.0f} MB, "
                          f"sum of per-process peaks {mem['sum_of_peaks']:.0f} MB (JVM {mem.get('jvm', 0):.0f}, "
                          f"Python daemon and workers {mem.get('worker', 0):.0f}, the largest of them "
                          f"{mem.get('max_worker', 0):.0f}, driver {mem.get('driver', 0):.0f}) "
                          f"[load {x['load']}]", flush=True)
                print(f"round {r} (session start, not counted: {res['session']:.1f}s)", flush=True)
            rows.append(row)
        for label, measured in runs.items():
            for run, what in ((1, "cold"), (2, "warm")):
                picked = [x for x in measured if x["run"] == run]
                for key, unit, value in (
                        ("per_core", "records/s per core", lambda x: n / x["cpu"]),
                        ("per_core_broker", "records/s per core, broker included",
                         lambda x: n / (x["cpu"] + x["broker_cpu"])),
                        ("e2e", "records/s end to end", lambda x: n / x["e2e"]),
                        ("tree_peak", "MB peak RSS of the tree", lambda x: x["memory"]["tree_peak"]),
                        ("sum_of_peaks", "MB sum of per-process peaks", lambda x: x["memory"]["sum_of_peaks"]),
                        ("jvm", "MB the JVM's peak", lambda x: x["memory"].get("jvm", 0.0)),
                        ("worker", "MB the Python daemon's and workers' peaks",
                         lambda x: x["memory"].get("worker", 0.0)),
                        ("max_worker", "MB the largest Python process's peak",
                         lambda x: x["memory"].get("max_worker", 0.0))):
                    values = sorted(value(x) for x in picked)
                    print(f"{label} {what} {unit}: median {values[len(values) // 2]:,.0f} "
                          f"(range {values[0]:,.0f}-{values[-1]:,.0f}) [{key}]")
        if not args.no_stream:
            for label in variants:
                for key, what in (("e2e1", "cold end to end"), ("e2e2", "warm end to end"),
                                  ("active1", "cold first to last"), ("active2", "warm first to last")):
                    ratios = sorted(row["stream"] / row[f"{label} {key}"] for row in rows)
                    print(f"{label}, {what}: {' '.join(f'{x:.2f}x' for x in ratios)} "
                          f"(median {ratios[len(ratios) // 2]:.2f}x)")
        if args.extras:
            extras(bootstrap, tmp, n, pipeline_file(tmp, "ingest"))


if __name__ == "__main__":
    main()
