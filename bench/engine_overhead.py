"""Issue 2: what the engine costs per record beside the raw loop's own work, with the Kafka clients taken out.

    .venv/bin/python -m bench.engine_overhead --records 200000 --repeat 7

`bench.throughput` times whole runs: consume, client threads, broker, checkpoints. Their noise (a few
points between runs on this shared machine) hides changes of a few tens of ns per record. Here three sides
run over the same real confluent-kafka `Message`s, consumed once from the embedded broker and kept in
memory, and each produces to the same kind of producer, one whose broker never answers (it only queues, as
librdkafka does before sending). So they differ only in the Python each runs per record:
- raw: the body of `bench.throughput`'s raw loop (decode, filter or count in a dict, encode, produce);
- floor: the least any engine offering the Processor API (docs/reference.md) does per record, and nothing
  else: a `Record` with the key decoded, a `process` call, an `emit` call that encodes and holds its output
  until `process` returns, then `produce`; a plain dict as the state. No failure handling, no timers, no per-partition
  tasks, no offsets kept: the API's own price, which no engine work can take away;
- engine: `Engine.process_messages` with the bench's processor and the worker's `KafkaSink`, its state a
  `StateMap` over RocksDB for the stateful one (no checkpoint is taken: the per-record part only).
- batch floor: what a contract the Processor API does not have would cost at least: one call per consumed batch
  with a list of `(key, value, timestamp)`, the processor calling `ctx.emit(value, key=..., timestamp=...)` per
  output, the engine keeping each partition's next offset. It prices the per-record API against the
  alternative (BENCHMARKS.md, issue 2); Stylus offers no such call.
Runs alternate; each figure is thread CPU per record, the median over `--repeat` runs.

`--batch` prices the columnar batch path (docs/batch.md) the same way, over bench.batch's filter and running totals:
its raw loops as that bench runs them (`produce` with `timestamp=`), the batch engine with `KeepBatch` /
`TotalsBatch` (`engine_for`: the worker's `BatchEngine` and `KafkaSink`, state in RocksDB), and the client's floors
(`bench.batch.floor_body`: read each Message and produce as many outputs, nothing decoded, then with each value
decoded by orjson). The floor with the decode bounds what any path that decodes exactly can gain in its thread.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer

from bench.throughput import KEEP, PARTITIONS, bench_pipeline, load_input, raw_batch
from stylus.api import Processor, Record, import_processor_class
from stylus.config.model import Pipeline, TopicSpec
from stylus.core.engine import NO_HEADERS, RaiseFailures
from stylus.core.engines import engine_for
from stylus.core.task import PartitionTask
from stylus.kafka.admin import create_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.runtime.sink import KafkaSink
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore

BATCH = 2000  # the worker's default consume() count
OUTPUT = "out"


def read_messages(records: int, bootstrap: str | None = None) -> list[Any]:
    """`records` real Messages of bench.throughput's input, consumed from the broker at `bootstrap` (a topic of
    their own), or from a broker of our own."""
    if bootstrap is None:
        with EmbeddedBroker() as broker:
            return read_messages(records, broker.bootstrap)
    topic = f"overhead-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic: TopicSpec(partitions=PARTITIONS)})
    load_input(bootstrap, topic, records)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    msgs: list[Any] = []
    while len(msgs) < records:
        msgs += [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
    consumer.close()
    return msgs


def queue_only_producer(on_delivery: Callable[[Any, Any], None] = lambda err, msg: None) -> Producer:
    """A producer that queues everything and sends nothing: its broker address has no one listening."""
    return Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2_000_000,
                     "queue.buffering.max.kbytes": 2_000_000, "linger.ms": 60_000,
                     "delivery.report.only.error": True, "on_delivery": on_delivery,
                     "log_level": 0})


def raw_body(producer: Producer, batches: list[list[Any]], stateful: bool) -> None:
    """bench.throughput's raw loop without its consume and commit, produce called positionally."""
    counts: dict[str, int] = {}
    positions: dict[int, int] = {}
    for batch in batches:
        raw_batch(batch, producer, OUTPUT, counts, positions, stateful, positional=True)


class FloorContext:
    """`ctx` of the floor: `emit` to the one output, encoded at once, held until `process` returns."""

    __slots__ = ("held", "raw_key", "record", "state", "timestamp")

    def __init__(self) -> None:
        self.held: list[tuple[Any, ...]] = []
        self.state: dict[str, Any] = {}
        self.record: Record | None = None
        self.raw_key: bytes | None = None
        self.timestamp = 0

    def emit(self, value: Any, key: str | None = None, topic: str | None = None, timestamp: int | None = None,
             headers: Any = None) -> None:
        raw_key = None if key is None else self.raw_key if key is self.record.key else key.encode()  # type: ignore[union-attr]
        self.held.append((OUTPUT, orjson.dumps(value), raw_key, -1, None, None,
                          self.timestamp if timestamp is None else timestamp))


def floor_body(producer: Producer, batches: list[list[Any]], processor: Processor) -> None:
    process, produce, loads, new_record = processor.process, producer.produce, orjson.loads, object.__new__
    ctx = FloorContext()
    held = ctx.held
    for batch in batches:
        for msg in [m for m in batch if m.error() is None]:
            key, timestamp = msg.key(), msg.timestamp()[1]
            record = new_record(Record)
            record.key = key.decode("utf-8", "surrogateescape")
            record.value = loads(msg.value())
            record.timestamp = timestamp
            record.topic = msg.topic()
            record.partition = msg.partition()
            record.offset = msg.offset()
            headers = msg.headers()
            record.headers = dict(headers) if headers else NO_HEADERS  # as the engine does
            ctx.record, ctx.raw_key, ctx.timestamp = record, key, timestamp
            process(record, ctx)  # type: ignore[arg-type]  # the floor's ctx offers what the bench's processors use
            for item in held:
                produce(*item)
            held.clear()


class BatchContext:
    """`ctx` of the batch floor: `emit` encodes at once and holds the output until the batch call returns."""

    __slots__ = ("held", "state")

    def __init__(self) -> None:
        self.held: list[tuple[Any, ...]] = []
        self.state: dict[str, Any] = {}

    def emit(self, value: Any, key: str | None = None, topic: str | None = None, timestamp: int | None = None,
             headers: Any = None) -> None:
        self.held.append((OUTPUT, orjson.dumps(value), None if key is None else key.encode(), -1, None, None,
                          timestamp))


def keep_types_batch(batch: list[tuple[str, Any, int]], ctx: BatchContext) -> None:
    emit = ctx.emit
    for key, value, timestamp in batch:
        if value["type"] in KEEP:
            emit(value, key=key, timestamp=timestamp)


def count_per_key_batch(batch: list[tuple[str, Any, int]], ctx: BatchContext) -> None:
    emit, state = ctx.emit, ctx.state
    for key, _value, timestamp in batch:
        n = (state.get(key) or 0) + 1
        state[key] = n
        emit({"key": key, "count": n}, key=key, timestamp=timestamp)


def batch_floor_body(producer: Producer, batches: list[list[Any]], stateful: bool) -> None:
    process = count_per_key_batch if stateful else keep_types_batch
    loads, produce = orjson.loads, producer.produce
    ctx = BatchContext()
    positions: dict[int, int] = {}  # each partition's next offset, as the raw loop and the engine keep
    for batch in batches:
        msgs = [m for m in batch if m.error() is None]
        records = [(m.key().decode("utf-8", "surrogateescape"), loads(m.value()), m.timestamp()[1]) for m in msgs]
        for msg in msgs:
            positions[msg.partition()] = msg.offset() + 1
        process(records, ctx)
        for item in ctx.held:
            produce(*item)
        ctx.held.clear()


def new_processor(pipeline: Pipeline) -> Processor:
    spec = pipeline.processors["p"]
    return import_processor_class(spec.class_)(config=spec.config, name="p")


def engine_body(producer: Producer, batches: list[list[Any]], pipeline: Pipeline, state_dir: Path) -> None:
    spec = pipeline.processors["p"]
    processor = new_processor(pipeline)
    engine = engine_for(processor, "p", spec, pipeline, KafkaSink(producer, pipeline, spec.outputs, hold=False),
                        RaiseFailures())  # a BatchProcessor gets the BatchEngine
    engine.start()
    tasks: dict[tuple[str, int], PartitionTask] = {}
    stores: list[RocksKV] = []

    def task_for(topic: str, partition: int) -> PartitionTask:
        task = tasks.get((topic, partition))
        if task is None:
            store = None
            if spec.stateful:
                stores.append(RocksKV(state_dir / f"{topic}-{partition}"))
                store = PartitionStore(stores[-1], cache_entries=spec.state.cache_entries)
            task = tasks[(topic, partition)] = PartitionTask(topic, partition, store)
        return task

    try:
        for batch in batches:
            engine.process_messages([m for m in batch if m.error() is None], task_for)  # as Worker._handle
    finally:
        for kv in stores:
            kv.close()


def loop_body(producer: Producer, batches: list[list[Any]], body: Callable[..., int], stateful: bool,
              **options: Any) -> None:
    """A loop body of bench.batch (`raw_batch`, `raw_totals`, `floor_body`) over every batch, as its raw loop calls
    it, without the consume and the commits."""
    counts: dict[str, Any] = {}
    positions: dict[int, int] = {}
    for batch in batches:
        body(batch, producer, OUTPUT, counts, positions, stateful, False, **options)


Side = tuple[Callable[..., None], tuple[Any, ...]]  # a body, and its arguments after the producer and the batches


def batch_sides(stateful: bool, topic_in: str, state_dir: str) -> dict[str, Side]:
    """`--batch`: per side of the filter (or, `stateful`, the running totals), its body and its arguments after the
    producer and the batches."""
    from bench.batch import floor_body as client_floor
    from bench.batch import pipeline_for, raw_totals

    cls = "bench.batch:TotalsBatch" if stateful else "bench.batch:KeepBatch"
    pipeline = pipeline_for("127.0.0.1:1", cls, topic_in, OUTPUT, state_dir, stateful=stateful)
    return {"raw": (loop_body, (raw_totals if stateful else raw_batch, stateful)),
            "batch": (engine_body, (pipeline,)),  # + a fresh state dir per run
            "client": (loop_body, (client_floor, stateful)),
            "client+decode": (partial(loop_body, decode=True), (client_floor, stateful))}


def batch_report(msgs: list[Any], batches: list[list[Any]], repeat: int, tmp: str) -> None:
    """`--batch`: the batch path's sides, alternating, for the filter and the running totals."""
    for stateful in (False, True):
        sides = batch_sides(stateful, msgs[0].topic(), f"{tmp}/unused")
        figures: dict[str, list[float]] = {name: [] for name in sides}
        for rep in range(repeat):
            for name, (body, args) in sides.items():
                extra = (Path(tmp) / f"batch-{int(stateful)}-{rep}",) if name == "batch" else ()
                figures[name].append(cpu_per_record(body, len(msgs), batches, *args, *extra))
        medians = {name: statistics.median(runs) for name, runs in figures.items()}
        raw = medians["raw"]
        print(f"{'totals' if stateful else 'filter'}, ns per record: " + ", ".join(
            f"{name} {medians[name]:,.0f} ({min(runs):,.0f}-{max(runs):,.0f}; raw/{name} {raw / medians[name]:.2f}x)"
            for name, runs in figures.items()), flush=True)


def cpu_per_record(body: Callable[..., None], records: int, *args: Any) -> float:
    """This thread's CPU per record of `body(producer, *args)`, with a fresh producer."""
    producer = queue_only_producer()
    started = time.thread_time()
    body(producer, *args)
    elapsed = time.thread_time() - started
    producer.purge()
    return elapsed / records * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--batch", action="store_true", help="the columnar batch path and the client's floors, "
                        "over bench.batch's filter and running totals, instead of the per-record engine")
    args = parser.parse_args()
    msgs = read_messages(args.records)
    batches = [msgs[i:i + BATCH] for i in range(0, len(msgs), BATCH)]
    topic_in = msgs[0].topic()
    gc.collect()
    gc.freeze()  # what the worker's GC setting does (stylus/runtime/gctune.py), for both sides
    with tempfile.TemporaryDirectory() as tmp:
        if args.batch:
            batch_report(msgs, batches, args.repeat, tmp)
            return
        for stateful in (False, True):
            pipeline = bench_pipeline("127.0.0.1:1", topic_in, OUTPUT, stateful, f"{tmp}/unused")
            figures: dict[str, list[float]] = {"raw": [], "floor": [], "engine": [], "batch": []}
            for rep in range(args.repeat):
                figures["raw"].append(cpu_per_record(raw_body, len(msgs), batches, stateful))
                figures["floor"].append(cpu_per_record(floor_body, len(msgs), batches, new_processor(pipeline)))
                state_dir = Path(tmp) / f"{int(stateful)}-{rep}"
                figures["engine"].append(cpu_per_record(engine_body, len(msgs), batches, pipeline, state_dir))
                figures["batch"].append(cpu_per_record(batch_floor_body, len(msgs), batches, stateful))
            raw, floor, engine, batch = (statistics.median(figures[k]) for k in ("raw", "floor", "engine", "batch"))
            spans = {k: f"{min(v):,.0f}-{max(v):,.0f}" for k, v in figures.items()}
            kind = "stateful" if stateful else "stateless"
            print(f"{kind}, ns per record: raw {raw:,.0f} ({spans['raw']}), floor {floor:,.0f} ({spans['floor']}), "
                  f"engine {engine:,.0f} ({spans['engine']}). The API's price (floor - raw) {floor - raw:,.0f}; the "
                  f"engine's own (engine - floor) {engine - floor:,.0f}; raw/engine {raw / engine:.2f}. A batch-level "
                  f"call's floor {batch:,.0f} ({spans['batch']}): raw/batch floor {raw / batch:.2f}", flush=True)


if __name__ == "__main__":
    main()
