"""Issue 33: the columnar batch path (docs/batch.md) against the per-record loops, each ratio from one invocation.

    .venv/bin/python -m bench.batch --records 1000000 [--only filter,totals,windows,spark]

Runs its own embedded broker and loads each input once. Every side runs in a fresh process (`--side`), so its
peak RSS is its own; it reports records/s (first record to last, as bench.throughput and bench.windows time
them), CPU seconds per record of its process, and peak RSS. Sides:
- filter: bench.throughput's stateless work (decode, keep 3 of 5 types, produce the kept records): its raw loop
  (`raw`), the per-record processor in the Worker (`record`, bench.throughput:KeepTypes) and the batch processor
  (`batch`, `KeepBatch`: `forward` of the rows kept, so the kept records' bytes go out as read);
- totals: per key, the running count and sum of `v`, emitted per input: a raw loop keeping them in a dict
  (`raw_totals`, the raw loop's produce and commits), the per-record processor (`Totals`, RocksDB state) and
  the batch processor (`TotalsBatch`, bulk state); 10,000 keys, and with `--keys 100,1000` also over inputs of
  that many keys (state costs per key per batch: fewer keys, fewer state reads and writes per record);
- windows: bench.windows' 1-minute tumbling sum per category by event time: its hand-written loop (`raw`),
  `stylus.windows` per record and `stylus.windows.batch` (every window of both checked against the true sums);
- spark: the filter's batch processor as a streaming replay (one Worker) and as a Spark backfill (`local[2]`, a
  fresh session, the second run of it: warm workers; first to last record), both writing to Kafka; and the
  per-record processor's backfill, for memory;
- spark-archive: the same, the backfills reading the input from a Parquet archive of it (100,000 records a
  file, made once) and writing Parquet files, as a backfill into the warehouse does: the batch processor's
  records go in and out as columns. Backfill memory is the peak RSS of the session's process tree
  (driver, JVM, Python workers), sampled.
Batch sides consume `--batch-size` records per call (default 2,000, the worker's); per-record sides keep their
defaults (bench.windows' per-record side: 5,000).
Ratios: batch records/s over the raw loop's (filter, totals, windows), backfill over stream (spark); memory: batch
peak RSS over the per-record processor's. `--repeat N` runs N rounds of each benchmark's sides (baseline, per-record,
batch, in that order) and reports the median of the rounds' ratios, each round's batch side against the baseline of
the same round: on a shared machine the speed drifts between runs far more than within a round. `--pin` runs each
stream side on a core of its own and the broker on the others (bench/pinning.py): the worker's price per record,
not the broker's, decides its rate, as where the broker runs elsewhere (the Spark sides, `local[2]`, refuse it).
`--floor` (filter, totals) adds what the work rests on (FLOORS): confluent-kafka's floor in Python, with and
without the orjson decode, the batch engine with nothing decoded, and librdkafka alone in C (`c`:
bench/native/floor.c, compiled with gcc against the librdkafka confluent-kafka loads).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: E402

from bench.backfill import tree_cpu  # noqa: E402
from bench.common import time_worker  # noqa: E402
from bench.pinning import pin_process, split_cores, thread_cpus  # noqa: E402
from bench.throughput import KEEP, PARTITIONS, bench_pipeline, load_input, raw_loop  # noqa: E402
from stylus import BatchProcessor, Processor  # noqa: E402
from stylus.config import parse_pipeline  # noqa: E402
from stylus.config.model import Pipeline, TopicSpec  # noqa: E402
from stylus.core.batch.ops import Groups  # noqa: E402
from stylus.kafka.admin import create_topics  # noqa: E402
from stylus.kafka.broker import EmbeddedBroker  # noqa: E402
from stylus.kafka.offsets import watermarks  # noqa: E402
from stylus.runtime.gctune import tune_for_streaming  # noqa: E402

#: `--floor`: the sides that price what the work rests on, and what each is
FLOORS = {"floor": "the client's floor (no decode, no work)",
          "floor+decode": "the client's floor with each value decoded (orjson, dropped)",
          "engine": "the batch engine with nothing decoded (raw bytes; the floor's records forwarded)",
          "c": "librdkafka's own floor, in C (the client's floor with no Python: bench/native/floor.c)"}
BATCH_SIZE = 2_000  # the worker's default: larger consume() calls wait on the fetcher here (docs/batch.md)
KEEP_ARRAY = pa.array(sorted(KEEP))


class KeepBatch(BatchProcessor):
    """The stateless filter on the batch path: the kept rows' records, unchanged."""

    fields = ("type",)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        ctx.forward(pc.is_in(batch.column("type"), KEEP_ARRAY))  # a mask: the batch is not filtered


class Totals(Processor):
    def process(self, record: Any, ctx: Any) -> None:
        count, total = ctx.state.get(record.key) or (0, 0.0)
        count, total = count + 1, total + record.value["v"]
        ctx.state[record.key] = [count, total]
        ctx.emit({"key": record.key, "count": count, "sum": total}, key=record.key)


class TotalsBatch(BatchProcessor):
    """`Totals` a batch at a time: state read and written once per key per batch."""

    fields = ("v",)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        keys = batch.column("key")
        groups = Groups(keys)
        counts_before, sums_before = ctx.state.get_columns(groups.names, default=(0, 0.0))  # of [count, sum]
        counts = groups.running_count(counts_before)
        sums = groups.running_sum(batch.column("v"), sums_before)
        ctx.state.set_columns(groups.names, groups.last(counts), groups.last(sums))
        ctx.emit_batch(pa.table({"key": keys, "count": counts, "sum": sums}), key="key",
                       timestamp=batch.column("timestamp"))


def raw_totals(msgs: list[Any], producer: Any, topic_out: str, totals: dict[str, Any], positions: dict[int, int],
               stateful: bool, positional: bool) -> int:
    """The raw loop's body for the totals (bench.throughput.raw_batch's shape): a dict of (count, sum)."""
    loads, dumps, produce = orjson.loads, orjson.dumps, producer.produce
    handled = 0
    for msg in msgs:
        if msg.error():
            continue
        value = loads(msg.value())
        key = msg.key()
        positions[msg.partition()] = msg.offset() + 1
        k = key.decode()
        count, total = totals.get(k, (0, 0.0))
        count, total = count + 1, total + value["v"]
        totals[k] = (count, total)
        while True:
            try:
                produce(topic_out, dumps({"key": k, "count": count, "sum": total}), key, timestamp=msg.timestamp()[1])
                break
            except BufferError:
                producer.poll(0.05)
        handled += 1
    return handled


def floor_body(msgs: list[Any], producer: Any, topic_out: str, counts: dict[str, Any], positions: dict[int, int],
               stateful: bool, positional: bool, decode: bool = False) -> int:
    """The least any path on this client can do for the same outputs (`floor` side): consume, read each record's
    value, key and timestamp, produce as many records as the work does (all for the totals, the 3 in 5 with
    `offset % 5 < 3` for the filter) with a fixed value, positionally. No decode, no decision, no state, no
    encode: what is left is the client's and the broker's price per record, which columnar work does not
    remove. `decode` (`floor+decode` side): each value also decoded by orjson, as any path with the per-record
    engine's exact JSON semantics decodes it, and the result dropped."""
    produce, handled, fixed = producer.produce, 0, b'{"key":"k0","count":1,"sum":0.5}'
    loads = orjson.loads if decode else None
    for msg in msgs:
        if msg.error():  # end-of-partition events, as the raw loop skips them
            continue
        value, key, offset = msg.value(), msg.key(), msg.offset()
        if loads is not None:
            loads(value)
        positions[msg.partition()] = offset + 1
        if stateful or offset % 5 < 3:
            while True:
                try:
                    produce(topic_out, fixed if stateful else value, key, -1, None, None, msg.timestamp()[1])
                    break
                except BufferError:
                    producer.poll(0.05)
        handled += 1
    return handled


class FloorBatch(BatchProcessor):
    """The batch engine's own price (`engine` side): the records `floor_body` produces, forwarded as read, with
    nothing decoded (`raw_input`: one binary value column). What the engine costs above the client's floor
    with a JSON decoder that cost nothing."""

    raw_input = True
    every = False  # the filter's 3 in 5 (`offset % 5 < 3`)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        offsets = batch.column("offset").to_numpy()
        ctx.forward(np.ones(len(offsets), dtype=bool) if self.every else offsets % 5 < 3)


class FloorBatchAll(FloorBatch):
    """`FloorBatch` for the totals: every record out."""

    every = True


def pipeline_for(bootstrap: str, cls: str, topic_in: str, topic_out: str, state_dir: str, *, stateful: bool,
                 batch_size: int | None = None, partitions: int = PARTITIONS) -> Pipeline:
    return bench_pipeline(bootstrap, topic_in, topic_out, stateful, state_dir, cls=cls, batch_size=batch_size,
                          partitions=partitions)


def windows_pipeline(bootstrap: str, cls: str, topic_in: str, state_dir: str, batch_size: int) -> Pipeline:
    """bench.windows' pipeline (1-minute tumbling sum of `amount` per `category`, exactly-once state) on the
    shared input; its own output topic."""
    out = f"sums-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {out: TopicSpec(partitions=PARTITIONS)})
    return parse_pipeline(json.dumps({
        "pipeline": f"bench-win-{uuid.uuid4().hex[:6]}", "kafka": {"bootstrap.servers": bootstrap},
        "topics": {topic_in: {"partitions": PARTITIONS}, out: {"partitions": PARTITIONS}},
        "processors": {"p": {
            "class": cls, "inputs": [topic_in], "outputs": [out],
            "config": {"window": {"type": "tumbling", "size": "1m"},
                       "aggregate": {"type": "sum", "field": "amount"}, "key": "category"},
            "semantics": {"state": "exactly_once", "output": "at_least_once"},
            "event_time": {"field": "ts", "allowed_lateness": "60s", "idle_timeout": "1s"},
            "state": {"dir": state_dir}, "batch_size": batch_size if "batch" in cls else 5000}}}))


# ------------------------------------------------------------------------------------------------ one side
def peak_rss_mb() -> float:
    return int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1024


def tree_rss_mb(pid: int) -> float:
    """RSS of `pid` and its descendants now (a Spark session: driver, JVM, Python daemon and workers)."""
    parents: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(stat[1]), []).append(int(entry))
            rss[int(entry)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo.extend(parents.get(current, []))
    return total / 2**20


def side(args: argparse.Namespace) -> dict[str, Any]:
    kind, which = args.side.split("/")
    if args.cpus:  # every thread (the imports' pools too); those the Kafka client and RocksDB start inherit it
        pin_process(os.getpid(), {int(cpu) for cpu in args.cpus.split(",")})
    tune_for_streaming()  # as bench.throughput: the raw loop gets the worker's GC setting too
    import stylus.core.batch.engine  # noqa: F401  # imported before the CPU clock starts, as the raw side's imports
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as state_dir:  # its state, gone with the side
        return run_one_side(args, kind, which, state_dir)


def run_one_side(args: argparse.Namespace, kind: str, which: str, state_dir: str) -> dict[str, Any]:
    """One side's run (`side`), its state in `state_dir`: records/s, CPU per record, peak RSS."""
    bootstrap, topic, n = args.bootstrap, args.topic, args.records
    out = f"out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {out: TopicSpec(partitions=PARTITIONS)})
    cpu = time.process_time()
    result: dict[str, Any] = {}
    if kind in ("filter", "totals"):
        stateful = kind == "totals"
        if which == "c":
            result.update(native_floor(bootstrap, topic, out, n, kind))
        elif which in ("raw", "floor", "floor+decode"):
            pipeline = pipeline_for(bootstrap, "bench.throughput:KeepTypes", topic, out, state_dir, stateful=False)
            body = partial(floor_body, decode=which == "floor+decode") if which.startswith("floor") \
                else raw_totals if stateful else None
            result["rate"] = raw_loop(pipeline, bootstrap, topic, out, n, stateful=stateful, body=body)
        else:
            cls = {("filter", "record"): "bench.throughput:KeepTypes", ("filter", "batch"): "bench.batch:KeepBatch",
                   ("totals", "record"): "bench.batch:Totals", ("totals", "batch"): "bench.batch:TotalsBatch",
                   ("filter", "engine"): "bench.batch:FloorBatch", ("totals", "engine"): "bench.batch:FloorBatchAll"}
            pipeline = pipeline_for(bootstrap, cls[(kind, which)], topic, out, state_dir, stateful=stateful,
                                    batch_size=args.batch_size if which in ("batch", "engine") else None)
            result["rate"] = time_worker(pipeline, "p", bootstrap, n)
    elif kind == "windows":
        from bench.windows import baseline

        if which == "raw":
            result["rate"], sums = baseline(bootstrap, topic, n)
        else:
            cls = "stylus.windows:WindowedProcessor" if which == "record" else \
                "stylus.windows.batch:BatchWindowedProcessor"
            pipeline = windows_pipeline(bootstrap, cls, topic, state_dir, args.batch_size)
            result["rate"], sums = windows_run(pipeline, bootstrap, n)
        result["sums"] = sorted([k, s, v] for (k, s), v in sums.items())
    elif kind in ("spark", "spark-archive"):
        cls = "bench.throughput:KeepTypes" if which == "backfill-record" else "bench.batch:KeepBatch"
        pipeline = pipeline_for(bootstrap, cls, topic, out, state_dir, stateful=False,
                                batch_size=args.batch_size if cls.endswith("Batch") else None)
        if which == "stream":
            result["rate"] = time_worker(pipeline, "p", bootstrap, n)
        else:
            result.update(backfill(pipeline, bootstrap, n, args.archive, state_dir))
    result.setdefault("cpu_us", (time.process_time() - cpu) / n * 1e6)
    result.setdefault("peak_rss_mb", peak_rss_mb())
    result["load"] = os.getloadavg()[0]
    result["cpus"] = sorted({cpu for cpus in thread_cpus(os.getpid()).values() for cpu in cpus})  # every thread's
    if kind in ("filter", "totals") and which in ("raw", "record", "batch"):  # the same work: the same outputs
        result["outputs"] = output_digest(bootstrap, out)
    return result


def output_digest(bootstrap: str, topic: str) -> list[int]:
    """[count, digest] of a topic's records: the digest a sum of each record's CRC-32 of key and value, so two
    topics holding the same records, in whatever order, give the same pair."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"digest-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        ends = {p: watermarks(consumer, topic, p)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count, digest, left = 0, 0, {p: end for p, end in ends.items() if end}
        while left:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    continue
                count += 1
                digest += zlib.crc32(msg.value() or b"", zlib.crc32(msg.key() or b""))
                if msg.offset() + 1 >= left.get(msg.partition(), -1):
                    left.pop(msg.partition(), None)
        return [count, digest % 2**64]
    finally:
        consumer.close()


def native_floor(bootstrap: str, topic: str, out: str, n: int, kind: str) -> dict[str, Any]:
    """The `c` side: bench/native/floor.c, compiled against the librdkafka confluent-kafka loads, run in this
    (pinned) process's place. Its rate and CPU per record are its own (its threads included)."""
    from stylus.kafka.columnar import _librdkafka_files

    libs = sorted(_librdkafka_files())
    if len(libs) != 1:
        raise RuntimeError(f"expected confluent-kafka's one librdkafka in this process, found {libs}")
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as build:
        binary = Path(build) / "floor"
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(ROOT / "bench/native/floor.c"), libs[0],
                        f"-Wl,-rpath,{Path(libs[0]).parent}"], check=True)
        done = subprocess.run([str(binary), bootstrap, topic, out, str(n), kind], capture_output=True, text=True,
                              timeout=600, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    found: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    if found.pop("failed"):
        raise RuntimeError(f"the C floor's deliveries failed: {done.stderr[-2000:]}")
    return found


def windows_run(pipeline: Pipeline, bootstrap: str, n: int) -> tuple[float, dict[tuple[str, int], int]]:
    """The Worker over bench.windows' input (n records + one closing record per partition), then its results."""
    from stylus.kafka.reader import read_topic

    spec = pipeline.processors["p"]
    rate = time_worker(pipeline, "p", bootstrap, n + PARTITIONS)  # the closing records close every window
    sums: dict[tuple[str, int], int] = {}
    for msg in read_topic(bootstrap, spec.outputs[0], timeout=120):
        r = orjson.loads(msg.value() or b"null")
        if r["key"] != "zz":
            assert (r["key"], r["start"]) not in sums, "a window was emitted twice"
            sums[(r["key"], r["start"])] = r["value"]
    return rate, sums


def backfill(pipeline: Pipeline, bootstrap: str, n: int, archive: str | None = None,
             scratch: str = "") -> dict[str, Any]:
    """A fresh `local[2]` session; the backfill twice (cold, then warm workers): the warm run's figures, and the
    process tree's peak RSS over both. With `archive`, from that Parquet archive to Parquet files in `scratch`."""
    from stylus.backfill.bounds import parse_bound
    from stylus.backfill.job import plan_for, run_plan
    from stylus.backfill.outputs import OutputTarget
    from stylus.backfill.session import spark_session

    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], tree_rss_mb(os.getpid()))

    spark = spark_session("local[2]", "bench-batch", preload=["bench.batch"])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out: dict[str, Any] = {}
    for run in ("cold", "warm"):
        cpu = tree_cpu(os.getpid())
        started = time.monotonic()
        plan = plan_for(pipeline, "p", bootstrap, parse_bound(None, default="earliest"),
                        parse_bound(None, default="latest"), source="archive" if archive else "kafka",
                        archive_root=archive)
        target = OutputTarget(kind="parquet", path=f"{scratch}/out-{run}") if archive else OutputTarget(kind="outputs")
        result = run_plan(spark, pipeline, "p", plan, target)
        assert result.records == n, (result.records, n)
        out[run] = {"e2e": time.monotonic() - started, "active": result.processing_seconds,
                    "tree_cpu_us": (tree_cpu(os.getpid()) - cpu) / n * 1e6, "mode": result.mode}
    done.set()
    sampler.join()
    spark.stop()
    out["rate"] = n / out["warm"]["active"]
    out["peak_rss_mb"] = peak[0]
    return out


def archive_topic(bootstrap: str, topic: str, root: str, per_file: int = 100_000) -> None:
    """Copy `topic` into a Parquet archive at `root`, `per_file` records a file, in offset order (as the
    archiver writes it)."""
    from stylus.archive import write_segment
    from stylus.backfill.bounds import parse_bound
    from stylus.backfill.job import plan_for
    from stylus.backfill.read import read_unit

    with tempfile.TemporaryDirectory() as unused:  # the pipeline's state dir, never written
        pipeline = pipeline_for(bootstrap, "bench.batch:KeepBatch", topic, "unused", unused, stateful=False)
        plan = plan_for(pipeline, "p", bootstrap, parse_bound(None, default="earliest"),
                        parse_bound(None, default="latest"))
    for unit in plan.units:
        rows = list(read_unit(unit, bootstrap, None))
        for first in range(0, len(rows), per_file):
            write_segment(root, unit.topic, unit.partition, rows[first:first + per_file])


# ------------------------------------------------------------------------------------------------ the parent
def run_side(name: str, bootstrap: str, topic: str, n: int, batch_size: int,
             archive: str | None = None, cpus: set[int] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.batch", "--side", name, "--bootstrap", bootstrap, "--topic", topic,
           "--records", str(n), "--batch-size", str(batch_size), *(["--archive", archive] if archive else []),
           *(["--cpus", ",".join(map(str, sorted(cpus)))] if cpus else [])]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
                          env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"side {name} failed ({done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    shown = {k: v for k, v in result.items() if k != "sums"}
    print(f"  {name:22} {result['rate']:>12,.0f} records/s  {result['cpu_us']:.2f} us CPU/record  "
          f"peak RSS {result['peak_rss_mb']:,.0f} MB  (load {result['load']:.1f})  {json.dumps(shown)[:300]}",
          flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--only", default="filter,totals,windows,spark")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="the batch sides' `batch_size`")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of each benchmark's sides, alternating; "
                        "ratios are the median over the rounds (each round's batch side against its own baseline)")
    parser.add_argument("--floor", action="store_true", help="filter and totals: also run the floors: the client's "
                        "(consume and produce as many records, no work: `floor_body`), the same with each value "
                        "decoded, and the batch engine's with nothing decoded (`FloorBatch`)")
    parser.add_argument("--pin", action="store_true", help="each stream side on one core of its own, the broker "
                        "on the others (needs two CPUs; not with the Spark sides)")
    parser.add_argument("--keys", type=lambda text: [int(k) for k in text.split(",")], default=[],
                        help="totals: also run them over inputs of these many keys (comma-separated; the shared "
                        "input has 10,000)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--archive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print("RESULT " + json.dumps(side(args)), flush=True)
        return
    kinds = args.only.split(",")
    side_cpus, broker_cpus = split_cores() if args.pin else (None, None)
    if args.pin and {"spark", "spark-archive"} & set(kinds):
        raise SystemExit("--pin gives a side one core; the Spark backfills run `local[2]`: run the spark sides "
                         "without --pin (--only filter,totals,windows)")
    if args.keys and "totals" not in kinds:
        raise SystemExit("--keys spreads the running totals' input: add totals to --only")
    n = args.records - args.records % PARTITIONS
    results: dict[str, list[dict[str, Any]]] = {}
    ratios: list[str] = []

    def rounds(kind: str, sides: tuple[str, ...], topic: str, want: Any = None,
               archive: str | None = None, label: str | None = None) -> None:
        """`repeat` rounds of the sides (batch, baseline, per-record[, floor]), then the summary lines, which
        `label` names (default: `kind`)."""
        label = label or kind
        print(label, flush=True)
        for _ in range(args.repeat):
            for which in (*sides[1:], sides[0]):  # the baseline first, as in every round
                result = run_side(f"{kind}/{which}", bootstrap, topic, n, args.batch_size, archive, side_cpus)
                if want is not None:
                    result["exact"] = result.pop("sums") == want
                    print(f"    every window exact: {result['exact']}", flush=True)
                results.setdefault(f"{label}/{which}", []).append(result)
        batch, base, record = (results[f"{label}/{which}"] for which in sides[:3])
        ratios.append(summary(label, batch, base, record))
        if "outputs" in base[0]:  # each round's batch and per-record outputs against its raw loop's
            same = all(b["outputs"] == r["outputs"] == p["outputs"]
                       for b, r, p in zip(batch, base, record, strict=True))
            ratios.append(f"{label}: outputs of batch, per-record and raw loop identical in every round: {same} "
                          f"({base[0]['outputs'][0]:,} records)")
        for which, what in FLOORS.items():  # the floors, each against the same round's baseline
            if f"{label}/{which}" in results:
                floor = sorted(f["rate"] / r["rate"] for f, r in zip(results[f"{label}/{which}"], base, strict=True))
                ratios.append(f"{label}: {what} = {statistics.median(floor):.2f}x the raw loop "
                              f"(rounds {floor[0]:.2f}-{floor[-1]:.2f}x)")

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap
        if broker_cpus:
            pin_process(broker.pid, broker_cpus)
            print(f"pinned: the broker on CPU {sorted(broker_cpus)}, each side on CPU {sorted(side_cpus or ())}",
                  flush=True)
        plain = f"bench-in-{uuid.uuid4().hex[:6]}"
        if {"filter", "totals", "spark", "spark-archive"} & set(kinds):
            create_topics(bootstrap, {plain: TopicSpec(partitions=PARTITIONS)})
            print(f"loading {n:,} records ...", flush=True)
            load_input(bootstrap, plain, n)
        stream_sides = ("batch", "raw", "record", *(FLOORS if args.floor else ()))
        for kind in ("filter", "totals"):
            if kind in kinds:
                rounds(kind, stream_sides, plain)
        for keys in args.keys:  # the totals over inputs of fewer or more keys
            spread = f"totals-{keys}keys-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, {spread: TopicSpec(partitions=PARTITIONS)})
            print(f"loading {n:,} records of {keys:,} keys ...", flush=True)
            load_input(bootstrap, spread, n, keys)
            rounds("totals", stream_sides, spread, label=f"totals over {keys:,} keys")
        if "windows" in kinds:
            from bench.windows import produce

            topic = f"events-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, {topic: TopicSpec(partitions=PARTITIONS)})
            expected = produce(bootstrap, topic, n)
            want = sorted([k, s, v] for (k, s), v in expected.items())
            print(f"({len(want)} windows)", flush=True)
            rounds("windows", ("batch", "raw", "record"), topic, want)
        if "spark" in kinds:
            rounds("spark", ("backfill", "stream", "backfill-record"), plain)
        if "spark-archive" in kinds:
            with tempfile.TemporaryDirectory(prefix="bench-archive-") as root:
                archive_topic(bootstrap, plain, root)
                rounds("spark-archive", ("backfill", "stream", "backfill-record"), plain, archive=root)
    print("\n".join(ratios))
    if args.json:
        args.json.write_text(json.dumps({"records": n, "results": results, "ratios": ratios}, indent=2))


def summary(kind: str, batch: list[dict[str, Any]], base: list[dict[str, Any]], record: list[dict[str, Any]]) -> str:
    """Medians over the rounds: of each round's ratio (batch against the baseline run of the same round), and of
    each side's records/s, CPU per record and peak RSS."""
    against = "streaming replay" if kind.startswith("spark") else "raw loop"
    paired = sorted(b["rate"] / r["rate"] for b, r in zip(batch, base, strict=True))
    spread = f" (rounds {paired[0]:.2f}-{paired[-1]:.2f}x)" if len(paired) > 1 else ""

    def median(runs: list[dict[str, Any]], field: str) -> float:
        return statistics.median(r[field] for r in runs)

    rate, cpu, rss = "rate", "cpu_us", "peak_rss_mb"
    return (f"{kind}: batch {median(batch, rate):,.0f} records/s = {statistics.median(paired):.2f}x the {against}"
            f"{spread} ({median(base, rate):,.0f}); CPU/record {median(batch, cpu):.2f} us against "
            f"{median(base, cpu):.2f}; peak RSS {median(batch, rss):,.0f} MB = "
            f"{median(batch, rss) / median(record, rss):.2f}x the per-record path's ({median(record, rss):,.0f} MB; "
            f"records/s {median(record, rate):,.0f}, CPU/record {median(record, cpu):.2f} us)")


if __name__ == "__main__":
    main()
