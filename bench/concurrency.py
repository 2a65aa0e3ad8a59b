"""Concurrent work inside a partition (docs/acker.md): a processor that calls a slow service per record, written
synchronously against the same processor written with `async def process` (and with `ctx.defer`) under
`concurrency: 64`, on the same input, through the real Worker and the embedded broker.

    .venv/bin/python -m bench.concurrency --records 3000 --repeat 3

The service is simulated (processors/lookup.py): 20 ms per call (`--latency`), `time.sleep` in the synchronous
processor, `asyncio.sleep` in the async ones; its answer is a pure function of the key. Each processor joins the
record with the answer, counts the records per key in its state (at-least-once state and output) and emits the
result keyed by the key. Input: `--records` records with 10,000 random keys in `--partitions` partitions (1 by
default: `concurrency` is per partition, so one partition compares one record at a time with 64 at a time).

Each variant runs in a fresh Worker (its own consumer group) over the whole input; records/s is measured inside
the processor, from the start of its first record to the completion of its last, so joining the group is left
out. The synchronous run is done once (its rate is the service's latency); the concurrent ones `--repeat` times,
and each run's outputs are compared with the synchronous run's as a multiset (order aside): the same values, the
same `seen` counts per key, the same `src` of every output. Reported: records/s of each, the ratio to the
synchronous rate (target >= 30x for `concurrency: 64` at 20 ms), CPU seconds of this process per 1,000 records
and the load average.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from processors.lookup import AsyncLookup, DeferredLookup, Lookup
from stylus import Context, Record
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline, TopicSpec
from stylus.kafka.admin import create_topics, delete_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.reader import read_topic
from stylus.kafka.settings import PRODUCER_DEFAULTS
from stylus.runtime.worker import Worker


class Clock:
    """When a processor started its first record and completed its last, and how many it completed."""

    def __init__(self) -> None:
        self.first = 0.0
        self.last = 0.0
        self.count = 0

    def start(self) -> None:
        if not self.first:
            self.first = time.perf_counter()

    def completed(self) -> None:
        self.last = time.perf_counter()
        self.count += 1

    @property
    def rate(self) -> float:
        return self.count / (self.last - self.first)


CLOCKS: dict[str, Clock] = {}


def _clock(name: str) -> Clock:
    return CLOCKS.setdefault(name, Clock())


class Timed:
    """Times a lookup processor: a record starts when `process` is called and completes when it is joined."""

    name: str

    def process(self, record: Record, ctx: Context) -> None:
        _clock(self.name).start()
        super().process(record, ctx)  # type: ignore[misc]

    def joined(self, record: Record, info: dict[str, Any], ctx: Context) -> None:
        super().joined(record, info, ctx)  # type: ignore[misc]
        _clock(self.name).completed()


class TimedLookup(Timed, Lookup):
    pass


class TimedAsyncLookup(Timed, AsyncLookup):
    async def process(self, record: Record, ctx: Context) -> None:  # type: ignore[override]
        _clock(self.name).start()
        await AsyncLookup.process(self, record, ctx)


class TimedDeferredLookup(Timed, DeferredLookup):
    pass


CLASSES = {"sync": "TimedLookup", "async": "TimedAsyncLookup", "deferred": "TimedDeferredLookup"}


def load_input(bootstrap: str, topic: str, records: int, keys: int) -> None:
    producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(1)
    for i in range(records):
        producer.produce(topic, orjson.dumps({"id": i}), f"u{rng.randrange(keys)}".encode())
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def pipeline_for(name: str, variant: str, topic_in: str, topic_out: str, args: argparse.Namespace,
                 state_dir: str) -> Pipeline:
    concurrency = f"concurrency: {args.concurrency}" if variant != "sync" else ""
    return parse_pipeline(f"""
pipeline: bench-{uuid.uuid4().hex[:6]}
topics:
  {topic_in}: {{partitions: {args.partitions}}}
  {topic_out}: {{partitions: {args.partitions}}}
processors:
  {name}:
    class: bench.concurrency:{CLASSES[variant]}
    inputs: [{topic_in}]
    outputs: [{topic_out}]
    config: {{latency: {args.latency}}}
    semantics: {{state: at_least_once, output: at_least_once}}
    checkpoint: {{interval: 2s}}
    state: {{dir: {state_dir}}}
    {concurrency}
""")


def run_variant(bootstrap: str, variant: str, topic_in: str, args: argparse.Namespace,
                state_dir: str) -> tuple[float, float, list[str]]:
    """(records/s, CPU seconds per 1,000 records, the outputs as sorted canonical JSON)."""
    name = f"{variant}-{uuid.uuid4().hex[:6]}"
    topic_out = f"bench-out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic_out: TopicSpec(partitions=args.partitions)})
    pipeline = pipeline_for(name, variant, topic_in, topic_out, args, state_dir)
    stop = threading.Event()
    worker = Worker(pipeline, name, bootstrap, stop=stop)
    thread = threading.Thread(target=worker.run, daemon=True)
    cpu = time.process_time()
    thread.start()
    # the worker imports `bench.concurrency:...`: its clocks live in that module, not in this `__main__`
    clock = importlib.import_module("bench.concurrency")._clock(name)
    while clock.count < args.records:
        if not thread.is_alive():
            raise RuntimeError(f"the {variant} worker stopped after {clock.count} records")
        time.sleep(0.05)
    cpu = time.process_time() - cpu
    stop.set()
    thread.join(120)
    outputs = sorted(orjson.dumps(orjson.loads(m.value()), option=orjson.OPT_SORT_KEYS).decode()
                     for m in read_topic(bootstrap, topic_out))
    delete_topics(bootstrap, [topic_out])
    return clock.rate, cpu / args.records * 1000, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--latency", default="20ms", help="per service call")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each concurrent variant")
    parser.add_argument("--variants", default="async,deferred", help="concurrent variants: async, deferred")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        bootstrap = broker.bootstrap
        topic_in = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, {topic_in: TopicSpec(partitions=args.partitions)})
        load_input(bootstrap, topic_in, args.records, args.keys)
        print(f"{args.records:,} records in {args.partitions} partition(s), {args.latency} per service call, "
              f"concurrency {args.concurrency}", flush=True)
        sync_rate, sync_cpu, expected = run_variant(bootstrap, "sync", topic_in, args, f"{tmp}/sync")
        print(f"  sync      {sync_rate:10,.1f} records/s  {sync_cpu:6.3f} CPU-s/1k records  "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        assert len(expected) == args.records, f"the synchronous run emitted {len(expected)} outputs"
        runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        loads = [os.getloadavg()[0]]
        for rep in range(args.repeat):
            for variant in variants:
                rate, cpu, outputs = run_variant(bootstrap, variant, topic_in, args, f"{tmp}/{variant}{rep}")
                same = outputs == expected
                load = os.getloadavg()[0]
                loads.append(load)
                runs[variant].append({"rate": rate, "cpu_per_1k": cpu, "ratio": rate / sync_rate, "same": same})
                print(f"  {variant:9} {rate:10,.1f} records/s  {cpu:6.3f} CPU-s/1k records  = {rate / sync_rate:5.1f}x"
                      f"  outputs {'identical' if same else 'DIFFER'} (run {rep + 1}, load {load:.1f})", flush=True)
                if not same:
                    raise SystemExit(f"{variant}: outputs differ from the synchronous processor's")
        summary = {}
        for variant in variants:
            ratios = sorted(r["ratio"] for r in runs[variant])
            summary[variant] = {"best": ratios[-1], "median": statistics.median(ratios),
                                "rate_median": statistics.median(r["rate"] for r in runs[variant])}
            print(f"{variant}: {summary[variant]['rate_median']:,.0f} records/s median, "
                  f"{summary[variant]['median']:.1f}x the synchronous processor (best {ratios[-1]:.1f}x); "
                  "outputs identical in every run")
        print(f"sync: {sync_rate:,.1f} records/s; load average (1 min) {min(loads):.1f}-{max(loads):.1f}")
        if args.json:
            args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "sync": sync_rate,
                                             "runs": runs, "summary": summary,
                                             "load": [min(loads), max(loads)]}, indent=2))


if __name__ == "__main__":
    main()
