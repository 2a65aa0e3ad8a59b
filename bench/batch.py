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
  the batch processor (`TotalsBatch`, bulk state);
- windows: bench.windows' 1-minute tumbling sum per category by event time: its hand-written loop (`raw`),
  `stylus.windows` per record and `stylus.windows.batch` (every window of both checked against the true sums);
- spark: the filter's batch processor as a streaming replay (one Worker) and as a Spark backfill (`local[2]`, a
  fresh session, the second run of it: warm workers; first to last record), both writing to Kafka; and the
  per-record processor's backfill, for memory. Backfill memory is the peak RSS of the session's process tree
  (driver, JVM, Python workers), sampled.
Batch sides consume `--batch-size` records per call (default 2,000, the worker's); per-record sides keep their
defaults (bench.windows' per-record side: 5,000).
Ratios: batch records/s over the raw loop's (filter, totals, windows), backfill over stream (spark); memory: batch
peak RSS over the per-record processor's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.backfill import tree_cpu  # noqa: E402
from bench.common import time_worker  # noqa: E402
from bench.throughput import KEEP, PARTITIONS, bench_pipeline, load_input, raw_loop  # noqa: E402
from stylus import BatchProcessor, Processor  # noqa: E402
from stylus.config import parse_pipeline  # noqa: E402
from stylus.config.model import Pipeline, TopicSpec  # noqa: E402
from stylus.core.batch.ops import Groups  # noqa: E402
from stylus.kafka.admin import create_topics  # noqa: E402
from stylus.kafka.broker import EmbeddedBroker  # noqa: E402
from stylus.runtime.gctune import tune_for_streaming  # noqa: E402

BATCH_SIZE = 2_000  # the worker's default: larger consume() calls wait on the fetcher here (docs/batch.md)
KEEP_ARRAY = pa.array(sorted(KEEP))


class KeepBatch(BatchProcessor):
    """The stateless filter on the batch path: the kept rows' records, unchanged."""

    fields = ("type",)

    def process_batch(self, batch: Any, ctx: Any) -> None:
        ctx.forward(batch.filter(pc.is_in(batch.column("type"), KEEP_ARRAY)))


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
        before = ctx.state.get_many(groups.names)  # [count, sum] per key, or None
        counts = groups.running_count(np.array([b[0] if b else 0 for b in before], dtype=np.int64))
        sums = groups.running_sum(batch.column("v"), np.array([b[1] if b else 0.0 for b in before]))
        ctx.state.set_many(dict(zip(groups.names, zip(groups.last(counts), groups.last(sums), strict=True),
                                    strict=True)))  # [count, sum] (a tuple is a JSON array)
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
    bootstrap, topic, n = args.bootstrap, args.topic, args.records
    tune_for_streaming()  # as bench.throughput: the raw loop gets the worker's GC setting too
    import stylus.core.batch.engine  # noqa: F401  # imported before the CPU clock starts, as the raw side's imports
    state_dir = tempfile.mkdtemp(prefix="bench-batch-")
    out = f"out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {out: TopicSpec(partitions=PARTITIONS)})
    cpu = time.process_time()
    result: dict[str, Any] = {}
    if kind in ("filter", "totals"):
        stateful = kind == "totals"
        if which == "raw":
            pipeline = pipeline_for(bootstrap, "bench.throughput:KeepTypes", topic, out, state_dir, stateful=False)
            result["rate"] = raw_loop(pipeline, bootstrap, topic, out, n, stateful=False,
                                      body=raw_totals if stateful else None)
        else:
            cls = {("filter", "record"): "bench.throughput:KeepTypes", ("filter", "batch"): "bench.batch:KeepBatch",
                   ("totals", "record"): "bench.batch:Totals", ("totals", "batch"): "bench.batch:TotalsBatch"}
            pipeline = pipeline_for(bootstrap, cls[(kind, which)], topic, out, state_dir, stateful=stateful,
                                    batch_size=args.batch_size if which == "batch" else None)
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
    elif kind == "spark":
        cls = "bench.throughput:KeepTypes" if which == "backfill-record" else "bench.batch:KeepBatch"
        pipeline = pipeline_for(bootstrap, cls, topic, out, state_dir, stateful=False,
                                batch_size=args.batch_size if cls.endswith("Batch") else None)
        if which == "stream":
            result["rate"] = time_worker(pipeline, "p", bootstrap, n)
        else:
            result.update(backfill(pipeline, bootstrap, n))
    result["cpu_us"] = (time.process_time() - cpu) / n * 1e6
    result.setdefault("peak_rss_mb", peak_rss_mb())
    result["load"] = os.getloadavg()[0]
    return result


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


def backfill(pipeline: Pipeline, bootstrap: str, n: int) -> dict[str, Any]:
    """A fresh `local[2]` session; the backfill twice (cold, then warm workers): the warm run's figures, and the
    process tree's peak RSS over both."""
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
                        parse_bound(None, default="latest"))
        result = run_plan(spark, pipeline, "p", plan, OutputTarget(kind="outputs"))
        assert result.records == n, (result.records, n)
        out[run] = {"e2e": time.monotonic() - started, "active": result.processing_seconds,
                    "tree_cpu_us": (tree_cpu(os.getpid()) - cpu) / n * 1e6, "mode": result.mode}
    done.set()
    sampler.join()
    spark.stop()
    out["rate"] = n / out["warm"]["active"]
    out["peak_rss_mb"] = peak[0]
    return out


# ------------------------------------------------------------------------------------------------ the parent
def run_side(name: str, bootstrap: str, topic: str, n: int, batch_size: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.batch", "--side", name, "--bootstrap", bootstrap, "--topic", topic,
           "--records", str(n), "--batch-size", str(batch_size)]
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
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print("RESULT " + json.dumps(side(args)), flush=True)
        return
    kinds = args.only.split(",")
    n = args.records - args.records % PARTITIONS
    results: dict[str, dict[str, Any]] = {}
    ratios: list[str] = []
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap
        plain = f"bench-in-{uuid.uuid4().hex[:6]}"
        if {"filter", "totals", "spark"} & set(kinds):
            create_topics(bootstrap, {plain: TopicSpec(partitions=PARTITIONS)})
            print(f"loading {n:,} records ...", flush=True)
            load_input(bootstrap, plain, n)
        for kind in ("filter", "totals"):
            if kind in kinds:
                print(kind, flush=True)
                for which in ("raw", "record", "batch"):
                    results[f"{kind}/{which}"] = run_side(f"{kind}/{which}", bootstrap, plain, n, args.batch_size)
                ratios.append(summary(kind, results[f"{kind}/batch"], results[f"{kind}/raw"],
                                      results[f"{kind}/record"]))
        if "windows" in kinds:
            from bench.windows import produce

            topic = f"events-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, {topic: TopicSpec(partitions=PARTITIONS)})
            expected = produce(bootstrap, topic, n)
            want = sorted([k, s, v] for (k, s), v in expected.items())
            print(f"windows ({len(want)} windows)", flush=True)
            for which in ("raw", "record", "batch"):
                results[f"windows/{which}"] = run_side(f"windows/{which}", bootstrap, topic, n, args.batch_size)
                exact = results[f"windows/{which}"].pop("sums") == want
                results[f"windows/{which}"]["exact"] = exact
                print(f"    every window exact: {exact}", flush=True)
            ratios.append(summary("windows", results["windows/batch"], results["windows/raw"],
                                  results["windows/record"]))
        if "spark" in kinds:
            print("spark", flush=True)
            for which in ("stream", "backfill", "backfill-record"):
                results[f"spark/{which}"] = run_side(f"spark/{which}", bootstrap, plain, n, args.batch_size)
            ratios.append(summary("spark", results["spark/backfill"], results["spark/stream"],
                                  results["spark/backfill-record"]))
    print("\n".join(ratios))
    if args.json:
        args.json.write_text(json.dumps({"records": n, "results": results, "ratios": ratios}, indent=2))


def summary(kind: str, batch: dict[str, Any], base: dict[str, Any], record: dict[str, Any]) -> str:
    against = "streaming replay" if kind == "spark" else "raw loop"
    return (f"{kind}: batch {batch['rate']:,.0f} records/s = {batch['rate'] / base['rate']:.2f}x the {against} "
            f"({base['rate']:,.0f}); CPU/record {batch['cpu_us']:.2f} us against {base['cpu_us']:.2f}; peak RSS "
            f"{batch['peak_rss_mb']:,.0f} MB = {batch['peak_rss_mb'] / record['peak_rss_mb']:.2f}x the per-record "
            f"path's ({record['peak_rss_mb']:,.0f} MB; records/s {record['rate']:,.0f})")


if __name__ == "__main__":
    main()
