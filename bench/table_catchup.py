"""Table catch-up after a restart: bounded by what changed since the copy's offsets, not by the topic's history.

A table of `--keys` keys whose topic holds `--updates` versions of each (history = keys x updates records).
Measured with the registry a worker uses (stylus/tables/registry.py), each round a fresh registry (a restart):
  cold      no local copy: the whole history is read
  warm      the RocksDB copy kept: nothing new since it was closed
  changed   the copy kept, then `--changed` keys updated while it was closed
  compacted no local copy, the topic compacted (one record per key): a new machine's load, for scale

    .venv/bin/python -m bench.table_catchup --keys 100000 --updates 10 --changed 1000
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Producer

from stylus.config.model import Pipeline
from stylus.kafka.admin import create_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.settings import client_config
from stylus.tables.registry import TableRegistry

PARTITIONS = 4


def _pipeline(topic: str) -> Pipeline:
    return Pipeline.model_validate({
        "pipeline": "bench-tables",
        "topics": {topic: {"partitions": PARTITIONS}, "in": {"partitions": PARTITIONS}},
        "tables": {"t": {"topic": topic, "placement": "global"}},
        "processors": {"p": {"class": "tests.tables.apps:Enricher", "inputs": ["in"]}},
    })


def _produce(bootstrap: str, topic: str, keys: range, version: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "partitioner": "murmur2_random", "enable.idempotence": True,
                         "queue.buffering.max.messages": 1_000_000})
    for n in keys:
        value = orjson.dumps({"id": n, "name": f"row-{n}", "version": version, "pad": "x" * 60})
        while True:
            try:
                producer.produce(topic, value, f"k{n}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _round(pipeline: Pipeline, bootstrap: str, directory: Path) -> tuple[float, int, float]:
    """(seconds to open and catch up, records applied, CPU seconds of this process) for a fresh registry."""
    cpu = time.process_time()
    started = time.perf_counter()
    registry = TableRegistry(pipeline, ["t"], directory, client_config("consumer", bootstrap, pipeline), owner="bench")
    registry.open("t")
    seconds = time.perf_counter() - started
    applied = registry.last_catch_up[0]
    registry.close()
    return seconds, applied, time.process_time() - cpu


def run(bootstrap: str, keys: int, updates: int, changed: int) -> None:
    topic = f"bench-table-{uuid.uuid4().hex[:6]}"
    compacted = f"{topic}-compacted"
    create_topics(bootstrap, {t: _pipeline(t).topics[t] for t in (topic,)})
    create_topics(bootstrap, {compacted: _pipeline(compacted).topics[compacted]})
    began = time.perf_counter()
    for version in range(updates):
        _produce(bootstrap, topic, range(keys), version)
    _produce(bootstrap, compacted, range(keys), updates - 1)  # what compaction leaves: one record per key
    print(f"produced {keys * updates:,} records ({keys:,} keys x {updates}) in {time.perf_counter() - began:.1f}s; "
          f"load {os.getloadavg()[0]:.1f}")
    base = Path(tempfile.mkdtemp(prefix="stylus-bench-tables-"))
    try:
        pipeline = _pipeline(topic)
        rows = []
        rows.append(("cold (no copy, whole history)", *_round(pipeline, bootstrap, base / "a")))
        rows.append(("warm (copy kept, nothing new)", *_round(pipeline, bootstrap, base / "a")))
        _produce(bootstrap, topic, range(changed), updates)
        rows.append((f"changed ({changed:,} keys updated)", *_round(pipeline, bootstrap, base / "a")))
        rows.append(("compacted topic, no copy", *_round(_pipeline(compacted), bootstrap, base / "b")))
        print(f"{'round':<34} {'seconds':>8} {'records applied':>16} {'CPU s':>7}")
        for name, seconds, applied, cpu in rows:
            print(f"{name:<34} {seconds:8.3f} {applied:16,} {cpu:7.2f}")
        print(f"load {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--changed", type=int, default=1000)
    parser.add_argument("--bootstrap", default=None, help="an existing broker (default: an embedded one)")
    args = parser.parse_args()
    if args.bootstrap:
        run(args.bootstrap, args.keys, args.updates, args.changed)
        return
    with EmbeddedBroker() as broker:
        run(broker.bootstrap, args.keys, args.updates, args.changed)


if __name__ == "__main__":
    main()
