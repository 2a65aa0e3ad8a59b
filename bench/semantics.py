"""Issue 3 benchmarks: the Counter Node under each semantics pair, and the paper's Figure 9 experiment.

    .venv/bin/python -m bench.semantics --records 500000

1. Counter Node (processors/counter.py) records/s under each (state, output) pair; the cost of
   exactly-once against at-least-once.
2. Figure 9: a deserialisation-heavy at-most-once processor (4 KB JSON values, checkpoint every 20 ms)
   with checkpoints overlapped with processing (`checkpoint.overlap: true`) against stop-and-checkpoint
   (`overlap: false`: records wait in the consumer's buffer while the checkpoint runs).
Each configuration runs in a fresh Worker on the same pre-loaded input; best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Producer

from bench.common import time_worker
from stylus import Context, Processor, Record
from stylus.config import parse_pipeline
from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics, delete_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.settings import PRODUCER_DEFAULTS

PARTITIONS = 4
PAIRS = [
    ("at_least_once", "at_least_once"),
    ("exactly_once", "at_least_once"),
    ("at_most_once", "at_most_once"),
    ("exactly_once", "at_most_once"),
    ("exactly_once", "exactly_once"),
]


class HeavyDecode(Processor):
    """Figure 9's processor: most of its time goes to decoding a large value (done by the JSON serde)."""

    def process(self, record: Record, ctx: Context) -> None:
        doc = record.value
        total = sum(item["v"] for item in doc["items"])
        n = (ctx.state.get(record.key) or 0) + 1
        ctx.state[record.key] = n
        ctx.emit({"id": doc["id"], "total": total, "n": n}, key=record.key)


def load(bootstrap: str, topic: str, records: int, heavy: bool) -> None:
    producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(3)
    base = 1_700_000_000_000
    for i in range(records):
        if heavy:
            value = {"id": i, "items": [{"k": f"item-{j}", "v": rng.random(), "tags": ["a", "b", "c"]}
                                        for j in range(60)]}
        else:
            value = {"id": i}
        while True:
            try:
                producer.produce(topic, orjson.dumps(value), f"k{rng.randrange(1000)}".encode(),
                                 timestamp=base + i)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def run_worker(bootstrap: str, topic_in: str, records: int, cls: str, state: str | None, output: str,
               interval: str, overlap: bool, state_dir: str) -> float:
    topic_out = f"sem-out-{uuid.uuid4().hex[:6]}"
    semantics = {"output": output} | ({"state": state} if state else {})
    pipeline = parse_pipeline(json.dumps({
        "pipeline": f"sem-{uuid.uuid4().hex[:6]}",
        "kafka": {"bootstrap.servers": bootstrap},
        "topics": {topic_in: {"partitions": PARTITIONS}, topic_out: {"partitions": PARTITIONS}},
        "processors": {"p": {"class": cls, "inputs": [topic_in], "outputs": [topic_out],
                             "config": {"window": "1h"}, "semantics": semantics,
                             "checkpoint": {"interval": interval, "overlap": overlap},
                             "state": {"dir": state_dir}, "on_error": "skip"}},
    }))
    create_topics(bootstrap, {topic_out: TopicSpec(partitions=PARTITIONS)})
    rate = time_worker(pipeline, "p", bootstrap, records)
    delete_topics(bootstrap, [topic_out])
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--heavy-records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, float] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        bootstrap = broker.bootstrap
        light, heavy = f"sem-in-{uuid.uuid4().hex[:6]}", f"sem-heavy-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, {light: TopicSpec(partitions=PARTITIONS), heavy: TopicSpec(partitions=PARTITIONS)})
        print(f"loading {args.records:,} counter records and {args.heavy_records:,} 4 KB records ...", flush=True)
        load(bootstrap, light, args.records, heavy=False)
        load(bootstrap, heavy, args.heavy_records, heavy=True)
        for state, output in PAIRS:
            name = f"counter {state}/{output}"
            rates = [run_worker(bootstrap, light, args.records, "processors.counter:CounterNode", state, output,
                                "2s", True, f"{tmp}/{uuid.uuid4().hex}") for _ in range(args.repeat)]
            results[name] = max(rates)
            print(f"  {name:45} {results[name]:>10,.0f} records/s", flush=True)
        eo = results["counter exactly_once/exactly_once"]
        alo = results["counter at_least_once/at_least_once"]
        print(f"exactly-once costs {1 - eo / alo:.1%} against at-least-once")
        for overlap in (True, False):
            name = f"figure 9: overlap={overlap}"
            rates = [run_worker(bootstrap, heavy, args.heavy_records, "bench.semantics:HeavyDecode",
                                "at_most_once", "at_most_once", "20ms", overlap, f"{tmp}/{uuid.uuid4().hex}")
                     for _ in range(args.repeat)]
            results[name] = max(rates)
            print(f"  {name:45} {results[name]:>10,.0f} records/s", flush=True)
        ratio = results["figure 9: overlap=True"] / results["figure 9: overlap=False"]
        print(f"overlapped checkpoints: {ratio:.2f}x stop-and-checkpoint")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
