"""Nexmark q0, q1, q2, q3, q4, q5, q7 and q8: records per CPU second of each implementation of each query, on the
embedded Apache Kafka, over the same generated events (docs/nexmark.md).

    .venv/bin/python -m bench.nexmark --events 500000 --repeat 3
    .venv/bin/python -m bench.nexmark --events 500000 --impl sql --pipeline other:q5=my-q5.yaml
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.nexmark --events 500000 --spark 3

An implementation of a query is a pipeline file and the processors of it that make the query (all of them when
none are named; a SQL app's YAML name stands for all of its processors), reading the events it needs (the bids from
`nexmark-bid`; the joins q3, q4 and q8 persons, auctions or both) and writing the query's rows from its last stage:
`IMPLEMENTATIONS` holds the hand-written Python processors (pipelines/nexmark/python.yaml) and the SQL apps
(pipelines/nexmark/sql.yaml); others come from the command line (`--pipeline IMPL:QUERY=FILE`) and are measured the
same way. The summary gives each implementation's CPU per
record against the hand-written one (the issue's budget for a SQL app: at most 1.25x).

Method: N events are generated (seed, rate) and written once; each run is a fresh copy of the pipeline (its own
consumer groups, output topics and state directory) whose processors run as real Workers, one thread each, in
this process. The clock is the process's CPU time (every thread: the workers, librdkafka's, checkpoints; the
broker is another process), from the end of the first input batch (its records are not counted) until every bid
is processed and every expected row has been produced and acknowledged. Records per CPU second = input records
counted / CPU seconds (the bids; for a join, the events of the topics it streams: q3 the auctions, its person table
being loaded when the workers start, before the clock; q4 the auctions and bids; q8 the persons and auctions): the
cost per record, steadier on this shared machine than wall time, which is printed too. Every run's rows are checked
against `stylus.nexmark.reference` over the same events (windowed queries: the windows the stream closes, those
ending by the newest event time of the topics the query reads; the source partitions are let idle after 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from stylus.config import load_pipeline
from stylus.config.model import Pipeline
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.reader import read_topic
from stylus.nexmark import GeneratorConfig, NexmarkGenerator, reference
from stylus.nexmark.kafka import Produced, ensure_topics, produce
from stylus.nexmark.model import Bid, Event, Kind, topics
from stylus.runtime.gctune import tune_for_streaming
from stylus.runtime.worker import Worker
from stylus.sql.expand import stages_of

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / "pipelines" / "nexmark" / "python.yaml"
SQL = ROOT / "pipelines" / "nexmark" / "sql.yaml"
BID_TOPIC = topics()["bid"]
SOURCES = {topic: kind for kind, topic in topics().items()}  # the generated events' topics, each of one kind
QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8")


@dataclass(frozen=True)
class QueryRun:
    """One implementation of one query: the pipeline file, and the processors that make the query (upstream
    first; None: every processor of the file)."""

    pipeline: Path
    processors: tuple[str, ...] | None = None
    batch: str | None = None  # a SQL app's `batch:` (docs/sql.md, "Batch compilation"); None: as the file says


BATCH_QUERIES = ("q0", "q1", "q2", "q5", "q7")  # the apps whose stages have a batch form
IMPLEMENTATIONS: dict[str, dict[str, QueryRun]] = {
    "python": {
        "q0": QueryRun(PYTHON, ("q0",)),
        "q1": QueryRun(PYTHON, ("q1",)),
        "q2": QueryRun(PYTHON, ("q2",)),
        "q5": QueryRun(PYTHON, ("q5-counts", "q5")),
        "q7": QueryRun(PYTHON, ("q7-partial", "q7")),
        "q3": QueryRun(PYTHON, ("q3",)),
        "q4": QueryRun(PYTHON, ("q4-keyed", "q4-winning", "q4")),
        "q8": QueryRun(PYTHON, ("q8-keyed", "q8")),
    },
    "sql": {query: QueryRun(SQL, (query,)) for query in QUERIES},  # each app runs as all of its processors
    # the same apps with every stage per record, and with every stage that has a batch form on the batch path
    "sql-record": {query: QueryRun(SQL, (query,), batch="never") for query in BATCH_QUERIES},
    "sql-batch": {query: QueryRun(SQL, (query,), batch="always") for query in BATCH_QUERIES},
}


def with_batch(path: Path, mode: str, tmp: str) -> Path:
    """A copy of the pipeline file whose `sql:` processors say `batch: mode` (their SQL files found as before)."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    for spec in doc["processors"].values():
        if "sql" in spec:
            spec["sql"] = str((path.parent / spec["sql"]).resolve())
            spec["batch"] = mode
    copy = Path(tmp) / f"{path.stem}-batch-{mode}.yaml"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    return copy


@dataclass
class Result:
    impl: str
    query: str
    records: int  # input records counted (those of the first batch are not)
    cpu: float  # process CPU seconds from the end of the first batch to the last row acknowledged
    wall: float
    rows: int
    exact: bool

    @property
    def per_cpu(self) -> float:
        return self.records / self.cpu

    @property
    def per_wall(self) -> float:
        return self.records / self.wall


def isolated(pipeline: Pipeline, names: list[str], tag: str, state_dir: str) -> Pipeline:
    """The processors `names` of `pipeline` as a pipeline of their own: a new name (fresh consumer groups), every
    topic but the generated events' renamed with `tag` (fresh outputs), state under `state_dir`, and the source
    partitions idle after 1 s (so a finite input closes its windows)."""
    rename = {t: t if t in SOURCES else f"{t}-{tag}" for t in pipeline.topics}
    processors = {}
    for name in names:
        spec = pipeline.processors[name]
        update: dict[str, Any] = {
            "inputs": tuple(rename[t] for t in spec.inputs), "outputs": tuple(rename[t] for t in spec.outputs),
            "groupings": {rename[t]: g for t, g in spec.groupings.items()},
            "state": spec.state.model_copy(update={"dir": state_dir}),
        }
        if spec.event_time is not None and set(SOURCES) & set(spec.inputs):
            update["event_time"] = spec.event_time.model_copy(update={"idle_timeout": 1.0})
        processors[name] = spec.model_copy(update=update)
    used = {t for spec in processors.values() for t in (*spec.inputs, *spec.outputs)}
    used |= {table.topic for table in pipeline.tables.values()}
    return pipeline.model_copy(update={
        "pipeline": f"{pipeline.pipeline}-{tag}",
        "topics": {rename[t]: s for t, s in pipeline.topics.items() if rename[t] in used},
        "processors": processors,
    })


class FirstBatch:
    """CPU and wall time at the end of the first batch a source worker processed (by the worker itself, so no
    thread polls it at high frequency), and how many records that batch held."""

    def __init__(self, worker: Worker) -> None:
        self.marked = threading.Event()
        self.cpu = self.wall = 0.0
        self.already = 0

        def mark() -> None:
            if not self.marked.is_set() and worker.processed:
                self.cpu, self.wall, self.already = time.process_time(), time.perf_counter(), worker.processed
                self.marked.set()

        worker.on_batch = mark


def run_query(bootstrap: str, impl: str, query: str, spec: QueryRun, events: dict[Kind, list[Any]], tmp: str
              ) -> Result:
    """One run of one implementation of `query` over the loaded events (by kind)."""
    loaded = load_pipeline(spec.pipeline if spec.batch is None else with_batch(spec.pipeline, spec.batch, tmp))
    order = loaded.topological_order()
    wanted = {stage for name in spec.processors or order for stage in stages_of(loaded, name) or [name]}
    names = [name for name in order if name in wanted]
    tag = uuid.uuid4().hex[:6]
    pipeline = isolated(loaded, names, tag, f"{tmp}/{impl}-{query}-{tag}")
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    read_by_the_query = {t for n in names for t in pipeline.processors[n].inputs}
    sources = [n for n in names if set(SOURCES) & set(pipeline.processors[n].inputs)]
    inputs = sum(len(events[SOURCES[t]]) for n in sources for t in pipeline.processors[n].inputs if t in SOURCES)
    finals = [n for n in names if not set(pipeline.processors[n].outputs) & read_by_the_query]
    outputs = [pipeline.processors[n].outputs[0] for n in finals]
    streamed = {SOURCES[t] for t in read_by_the_query if t in SOURCES}
    end = min(events[kind][-1]["dateTime"] for kind in streamed)  # the windows the stream closes end by it
    expected = reference.run(query, events["bid"], watermark=end, persons=events["person"],
                             auctions=events["auction"])

    stop = threading.Event()
    workers = {n: Worker(pipeline, n, bootstrap, stop=stop) for n in names}
    marks = [FirstBatch(workers[n]) for n in sources]
    errors: list[BaseException] = []

    def run(worker: Worker) -> None:
        try:
            worker.run()
        except BaseException as exc:  # reported below
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in workers.values()]
    for thread in threads:
        thread.start()

    def done() -> bool:
        return (sum(workers[n].processed for n in sources) >= inputs
                and sum(workers[n].sink.emitted for n in finals) >= len(expected))

    deadline = time.monotonic() + 600
    while not done() and not stop.wait(0.05):  # 20 looks a second: no measurable share of the GIL
        if time.monotonic() > deadline:
            stop.set()
            raise RuntimeError(f"{impl}/{query}: not done after 600 s")
    for n in finals if not errors else ():  # a failed worker closed its producer: its error is reported below
        workers[n].sink.flush()
    cpu, wall = time.process_time(), time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join(60)
    if errors:
        raise RuntimeError(f"{impl}/{query} failed: {errors[0]}") from errors[0]
    rows = [orjson.loads(m.value() or b"null") for topic in outputs for m in read_topic(bootstrap, topic)]
    problem = reference.diff(query, rows, expected)
    if problem:
        print(f"  WRONG ROWS: {problem}", flush=True)
    delete_topics(bootstrap, [t for t in pipeline_topics(pipeline) if t not in SOURCES])
    counted = inputs - sum(m.already for m in marks)
    first_cpu, first_wall = min(m.cpu for m in marks), min(m.wall for m in marks)
    return Result(impl, query, counted, cpu - first_cpu, wall - first_wall, len(rows), not problem)


def load(bootstrap: str, count: int, config: GeneratorConfig) -> tuple[dict[Kind, list[Any]], Produced]:
    """Write `count` generated events to the three topics; returns them by kind (for the reference) and the
    counts."""
    partitions = load_pipeline(PYTHON).topics[BID_TOPIC].partitions
    ensure_topics(bootstrap, partitions=partitions)
    kept: dict[Kind, list[Any]] = {"person": [], "auction": [], "bid": []}

    def keeping(events: NexmarkGenerator) -> Iterator[Event]:
        for event in islice(events, count):
            kept[event.kind].append(event.value)
            yield event

    def progress(done: Produced) -> None:
        print(f"  {done.total:,}/{count:,} events", flush=True)

    started = time.perf_counter()
    produced = produce(bootstrap, keeping(NexmarkGenerator(config)), progress=progress, progress_every=10.0)
    print(f"loaded {produced.total:,} events ({produced.counts['bid']:,} bids, {partitions} partitions each) in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    return kept, produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=500_000, help="events generated (46/50 of them bids)")
    parser.add_argument("--rate", type=int, default=10_000, help="events per second of event time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--impl", action="append", default=None, help="implementations to run (default: all)")
    parser.add_argument("--pipeline", action="append", default=[], metavar="IMPL:QUERY=FILE",
                        help="add an implementation of a query: every processor of FILE (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best per CPU second is reported")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--spark", type=int, default=0, metavar="ROUNDS",
                        help="also backfill every implementation on Spark, and run the Spark SQL translations, ROUNDS "
                             "times each in one session (bench/nexmark_spark.py)")
    parser.add_argument("--master", default="local[2]", help="the Spark master of --spark")
    parser.add_argument("--c2", action="store_true", help="Spark's JVM with its C2 compiler (a local backfill session "
                        "stops at C1: stylus/backfill/session.py)")
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming runs (with --spark)")
    args = parser.parse_args()
    impls = {name: dict(queries) for name, queries in IMPLEMENTATIONS.items()}
    for item in args.pipeline:
        target, _, path = item.partition("=")
        impl, _, query = target.partition(":")
        impls.setdefault(impl, {})[query] = QueryRun(Path(path))
    chosen = args.impl or list(impls)
    queries = args.queries.split(",")
    tune_for_streaming()  # the workers set it for the whole process: set it before the first run, as bench.throughput
    results: list[Result] = []
    loads: list[float] = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        events, produced = load(broker.bootstrap, args.events, GeneratorConfig(seed=args.seed, rate=args.rate))
        bids: list[Bid] = events["bid"]
        end = bids[-1]["dateTime"]
        for rep in range(0 if args.no_stream else args.repeat):
            for query in queries:
                for impl in chosen:
                    if query not in impls[impl]:
                        continue
                    result = run_query(broker.bootstrap, impl, query, impls[impl][query], events, tmp)
                    loads.append(os.getloadavg()[0])
                    results.append(result)
                    print(f"  {query} {impl:8} run {rep + 1}: {result.per_cpu:,.0f} records/CPU-s "
                          f"({result.cpu:.2f} CPU-s), {result.per_wall:,.0f} records/s wall, {result.rows:,} rows"
                          f"{'' if result.exact else ' WRONG'}  (load {loads[-1]:.1f})", flush=True)
        spark: dict[str, Any] = {}
        if args.spark:
            from bench.nexmark_spark import bench_spark

            over_bids = [q for q in queries if q not in reference.JOINS]  # the Spark runs read the bids only
            spark = bench_spark(broker.bootstrap, {i: impls[i] for i in chosen}, over_bids, bids, end, tmp,
                                rounds=args.spark, master=args.master, c2=args.c2)
    if loads:
        print(f"\n{produced.counts['bid']:,} bids of {produced.total:,} events; load average (1 min) "
              f"{min(loads):.1f}-{max(loads):.1f}")
    summary: dict[str, dict[str, Any]] = {}
    for query in queries:
        for impl in chosen:
            runs = [r for r in results if r.query == query and r.impl == impl]
            if runs:
                best = max(runs, key=lambda r: r.per_cpu)
                summary.setdefault(query, {})[impl] = {
                    "records_per_cpu_s": best.per_cpu, "median_per_cpu_s": statistics.median(r.per_cpu for r in runs),
                    "records_per_s_wall": best.per_wall, "rows": best.rows, "exact": all(r.exact for r in runs)}
                base = summary[query].get("python")
                if base is not None and impl != "python":  # CPU per record against the hand-written processors
                    summary[query][impl]["cpu_per_record_vs_python"] = base["records_per_cpu_s"] / best.per_cpu
                    summary[query][impl]["median_cpu_per_record_vs_python"] = (
                        base["median_per_cpu_s"] / summary[query][impl]["median_per_cpu_s"])
                entry = summary[query][impl]
                versus = (f"  CPU/record {entry['cpu_per_record_vs_python']:.2f}x python's (medians "
                          f"{entry['median_cpu_per_record_vs_python']:.2f}x)" if "cpu_per_record_vs_python" in entry
                          else "")
                print(f"{query} {impl:8} {best.per_cpu:>10,.0f} records/CPU-s  {best.per_wall:>10,.0f} records/s wall"
                      f"  {best.rows:>8,} rows  {'exact' if all(r.exact for r in runs) else 'WRONG'}{versus}")
    if args.json:
        args.json.write_text(json.dumps({"events": args.events, "bids": len(bids), "rate": args.rate,
                                         "seed": args.seed, "summary": summary, "spark": spark,
                                         "load": [min(loads), max(loads)] if loads else None,
                                         "runs": [r.__dict__ for r in results]}, indent=2))
    if not all(r.exact for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
