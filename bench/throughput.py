"""Issue 2 throughput: a hand-written confluent-kafka loop against the same work as a Stylus processor.

    .venv/bin/python -m bench.throughput --records 1000000

Work: consume 1,000,000 small JSON records from 4 partitions, decode, filter (keep 3 of 5 types),
produce the kept records. Stateful variant: count per key (10,000 keys) and emit the running count;
the raw loop keeps counts in a dict, Stylus in RocksDB (at-least-once state and output). Both sides
use the same client settings (`client_config` of the same pipeline: the best found, see
shared/notes/broker.md; the raw producer also reports only failed deliveries, and checks them), the same
JSON library, commit offsets every 2 s, and are timed from their first record to their last. Runs
alternate (raw, stylus, raw, stylus, ...) and the best of each is reported, by wall clock and by records
per CPU second of the process (client threads included; the broker is another process): the machine is
shared, and CPU time is the steadier measure. The raw loop calls `produce(topic, value, key,
timestamp=...)` as the confluent-kafka docs show; `--raw-positional` makes it pass every argument
positionally as Stylus does (keyword parsing costs confluent-kafka ~0.3 us per call).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.common import time_worker
from stylus import Context, Processor, Record
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline, TopicSpec
from stylus.kafka.admin import create_topics, delete_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.settings import PRODUCER_DEFAULTS, client_config
from stylus.runtime.gctune import tune_for_streaming

TYPES = ["post", "comment", "like", "share", "view"]
KEEP = {"post", "comment", "share"}
PARTITIONS = 4


class KeepTypes(Processor):
    def process(self, record: Record, ctx: Context) -> None:
        if record.value["type"] in KEEP:
            ctx.emit(record.value, key=record.key)


class CountPerKey(Processor):
    def process(self, record: Record, ctx: Context) -> None:
        n = (ctx.state.get(record.key) or 0) + 1
        ctx.state[record.key] = n
        ctx.emit({"key": record.key, "count": n}, key=record.key)


def load_input(bootstrap: str, topic: str, records: int, keys: int = 10_000) -> None:
    """`records` JSON objects `{id, type, user, v}`, keyed by one of `keys` keys at random."""
    producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(1)
    for i in range(records):
        value = {"id": i, "type": TYPES[i % 5], "user": rng.randrange(100000), "v": rng.random()}
        key = f"k{rng.randrange(keys)}".encode()
        while True:
            try:
                producer.produce(topic, orjson.dumps(value), key)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 100000 == 0:
            print(f"  loaded {i:,}/{records:,}", flush=True)
    producer.flush(60)


def raw_batch(msgs: list[Any], producer: Producer, topic_out: str, counts: dict[str, int],
              positions: dict[int, int], stateful: bool, positional: bool = False) -> int:
    """The raw loop's work on one consumed batch (also bench/engine_overhead.py's raw side): decode, filter or
    count in `counts`, encode, produce; `positions` gets each partition's next offset. Returns the records
    handled."""
    loads, dumps, produce = orjson.loads, orjson.dumps, producer.produce
    handled = 0
    for msg in msgs:
        if msg.error():
            continue
        value = loads(msg.value())
        key = msg.key()
        positions[msg.partition()] = msg.offset() + 1
        if stateful:
            k = key.decode()
            n = counts.get(k, 0) + 1
            counts[k] = n
            out: Any = {"key": k, "count": n}
        elif value["type"] in KEEP:
            out = value
        else:
            handled += 1
            continue
        while True:
            try:
                if positional:  # (topic, value, key, partition, callback, on_delivery, timestamp)
                    produce(topic_out, dumps(out), key, -1, None, None, msg.timestamp()[1])
                else:
                    produce(topic_out, dumps(out), key, timestamp=msg.timestamp()[1])
                break
            except BufferError:
                producer.poll(0.05)
        handled += 1
    return handled


def raw_loop(pipeline: Pipeline, bootstrap: str, topic_in: str, topic_out: str, records: int, stateful: bool,
             positional: bool = False, body: Callable[..., int] | None = None) -> float:
    """The ceiling: the same work written by hand with the same client settings as the Stylus worker. `body`:
    other work per consumed batch, called as `raw_batch` is (bench/batch.py's running totals)."""
    failed: list[Any] = []
    consumer = Consumer(client_config("consumer", bootstrap, pipeline, "p", **{"group.id": f"raw-{uuid.uuid4().hex}"}))
    producer = Producer(client_config("producer", bootstrap, pipeline, "p", **{"delivery.report.only.error": True})
                        | {"on_delivery": lambda err, msg: failed.append(err)})
    consumer.subscribe([topic_in])
    counts: dict[str, int] = {}
    positions: dict[int, int] = {}
    seen = 0
    first = 0.0
    next_commit = time.monotonic() + 2.0
    while seen < records:
        msgs = consumer.consume(num_messages=2000, timeout=0.1)
        if not msgs:
            producer.poll(0)
            continue
        if not first:
            first = time.perf_counter()
        seen += (body or raw_batch)(msgs, producer, topic_out, counts, positions, stateful, positional)
        producer.poll(0)
        if time.monotonic() >= next_commit:
            producer.flush()
            consumer.commit(offsets=[TopicPartition(topic_in, p, o) for p, o in positions.items()], asynchronous=False)
            next_commit = time.monotonic() + 2.0
    producer.flush()
    elapsed = time.perf_counter() - first
    consumer.close()
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[0]}")
    return records / elapsed


def bench_pipeline(bootstrap: str, topic_in: str, topic_out: str, stateful: bool, state_dir: str, *,
                   cls: str | None = None, batch_size: int | None = None, partitions: int = PARTITIONS) -> Pipeline:
    """One processor `p` from `topic_in` to `topic_out`, at-least-once: this benchmark's (`cls` None) or another
    bench's processor class on the same settings (bench/batch.py)."""
    cls = cls or ("bench.throughput:CountPerKey" if stateful else "bench.throughput:KeepTypes")
    semantics = "{state: at_least_once, output: at_least_once}" if stateful else "{output: at_least_once}"
    size = f"\n    batch_size: {batch_size}" if batch_size else ""
    return parse_pipeline(f"""
pipeline: bench-{uuid.uuid4().hex[:6]}
kafka: {{bootstrap.servers: "{bootstrap}"}}
topics:
  {topic_in}: {{partitions: {partitions}}}
  {topic_out}: {{partitions: {partitions}}}
processors:
  p:
    class: {cls}
    inputs: [{topic_in}]
    outputs: [{topic_out}]
    semantics: {semantics}
    checkpoint: {{interval: 2s}}
    on_error: skip
    state: {{dir: {state_dir}}}{size}
""")


def stylus_run(pipeline: Pipeline, bootstrap: str, records: int) -> float:
    """The same work as a Stylus processor, run by the real Worker."""
    return time_worker(pipeline, "p", bootstrap, records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--raw-positional", action="store_true", help="the raw loop passes produce() arguments "
                        "positionally, as Stylus does")
    args = parser.parse_args()
    # The worker raises the GC threshold for its whole process (stylus/runtime/gctune.py); set it before any
    # run, so the raw loop has the same interpreter settings in every run, not only after the first Stylus one.
    tune_for_streaming()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        bootstrap = broker.bootstrap
        topic_in = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, {topic_in: TopicSpec(partitions=PARTITIONS)})
        print(f"loading {args.records:,} records into {PARTITIONS} partitions ...", flush=True)
        load_input(bootstrap, topic_in, args.records)
        results: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        loads: list[float] = []
        for stateful in (False, True):
            kind = "stateless" if not stateful else "stateful"
            for rep in range(args.repeat):
                for side in ("raw", "stylus"):
                    out = f"bench-out-{uuid.uuid4().hex[:6]}"
                    create_topics(bootstrap, {out: TopicSpec(partitions=PARTITIONS)})
                    pipeline = bench_pipeline(bootstrap, topic_in, out, stateful, f"{tmp}/s{rep}")
                    cpu_start = time.process_time()
                    if side == "raw":
                        rate = raw_loop(pipeline, bootstrap, topic_in, out, args.records, stateful, args.raw_positional)
                    else:
                        rate = stylus_run(pipeline, bootstrap, args.records)
                    per_cpu = args.records / (time.process_time() - cpu_start)  # whole run: join, clients, close
                    delete_topics(bootstrap, [out])
                    load = os.getloadavg()[0]
                    loads.append(load)
                    results.setdefault(f"{kind}/{side}", []).append(rate)
                    cpu.setdefault(f"{kind}/{side}", []).append(per_cpu)
                    print(f"  {kind:9} {side:6} run {rep + 1}: {rate:,.0f} records/s, {per_cpu:,.0f} records/CPU-s"
                          f"  (load {load:.1f})", flush=True)
        summary = {}
        for kind in ("stateless", "stateful"):
            raw, sty = max(results[f"{kind}/raw"]), max(results[f"{kind}/stylus"])
            raw_cpu, sty_cpu = max(cpu[f"{kind}/raw"]), max(cpu[f"{kind}/stylus"])
            # each Stylus run against the raw run just before it: the machine's speed drifts by 20-30% between
            # runs (neighbours, clock), and a pair shares most of that drift where two bests need not
            paired = sorted(s / r for r, s in zip(results[f"{kind}/raw"], results[f"{kind}/stylus"], strict=True))
            summary[kind] = {"raw": raw, "stylus": sty, "ratio": sty / raw,
                             "raw_cpu": raw_cpu, "stylus_cpu": sty_cpu, "ratio_cpu": sty_cpu / raw_cpu,
                             "paired_median": statistics.median(paired), "paired": paired}
            print(f"{kind:9}: raw {raw:,.0f}/s  stylus {sty:,.0f}/s  = {sty / raw:.0%} of the raw loop;  per CPU-s: "
                  f"raw {raw_cpu:,.0f}  stylus {sty_cpu:,.0f}  = {sty_cpu / raw_cpu:.0%};  paired runs: median "
                  f"{statistics.median(paired):.0%} ({paired[0]:.0%}-{paired[-1]:.0%})")
        print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}")
        if args.json:
            args.json.write_text(json.dumps({"records": args.records, "raw_positional": args.raw_positional,
                                             "runs": results, "runs_cpu": cpu, "best": summary,
                                             "load": [min(loads), max(loads)]}, indent=2))


if __name__ == "__main__":
    main()
