"""Issue 5 benchmark: a 1-minute tumbling sum per category with stylus windows vs a hand-written
confluent-kafka loop doing the same sums in a dict; then end-to-end event-time latency.

    .venv/bin/python -m bench.windows --records 1000000

Runs its own embedded broker. Input: 4 partitions, 50 categories (keyed), event times disordered
across partitions (partition p runs p*20 s behind) and within each (shuffled within 10 s). Stylus
runs `stylus.windows` (config-only `Windowed` processor, exactly-once state, at-least-once output,
allowed_lateness 60 s) in a real Worker; its rate is measured from its first to its last input
record (the consumer-group join is not counted). Every window of both is checked against the exact
sums computed while producing. Latency: 1 s windows on a live stream, from window end (event time
= wall time at production) to the result arriving at a reader.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from tempfile import TemporaryDirectory

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stylus.config import load_pipeline  # noqa: E402
from stylus.kafka.admin import create_topics, pipeline_topics  # noqa: E402
from stylus.kafka.broker import EmbeddedBroker  # noqa: E402
from stylus.kafka.reader import read_topic  # noqa: E402
from stylus.runtime.runner import PipelineRunner  # noqa: E402

PARTITIONS = 4
CATEGORIES = [f"c{i:02d}" for i in range(50)]
MINUTE = 60_000
BASE = 1_700_000_000_000 - 1_700_000_000_000 % MINUTE
FAR = BASE + 10**9


def pipeline_file(tmp: Path, tag: str, size: str, lateness: str) -> Path:
    path = tmp / f"bench-{tag}.yaml"
    path.write_text(json.dumps({
        "pipeline": f"bench-win-{tag}",
        "topics": {f"events-{tag}": {"partitions": PARTITIONS}, f"sums-{tag}": {"partitions": PARTITIONS}},
        "processors": {"win": {
            "class": "tests.apps.timed:Windowed",
            "inputs": [f"events-{tag}"], "outputs": [f"sums-{tag}"],
            "config": {"window": {"type": "tumbling", "size": size},
                       "aggregate": {"type": "sum", "field": "amount"}, "key": "category"},
            "semantics": {"state": "exactly_once", "output": "at_least_once"},
            "event_time": {"field": "ts", "allowed_lateness": lateness, "idle_timeout": "1s"},
            "state": {"dir": str(tmp / "state")}, "batch_size": 5000,
        }},
    }))
    return path


def produce(bootstrap: str, topic: str, n: int) -> dict[tuple[str, int], int]:
    """n records, disordered across and within partitions; returns the exact per-window sums."""
    rng = random.Random(5)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000})
    expected: dict[tuple[str, int], int] = defaultdict(int)
    per = n // PARTITIONS
    for p in range(PARTITIONS):
        rows = []
        for i in range(per):
            ts = BASE + i * 2 - p * 20_000 + 20_000 * PARTITIONS  # partition p runs p*20 s behind
            category = CATEGORIES[((i * 7) % (len(CATEGORIES) // PARTITIONS)) * PARTITIONS + p]  # keyed: one home
            amount = rng.randint(1, 100)
            expected[(category, ts - ts % MINUTE)] += amount
            rows.append((ts + rng.uniform(0, 10_000), ts, category, amount))
        rows.sort()
        rows.append((0, FAR, "zz", 0))  # closes every window at the end
        for _, ts, category, amount in rows:
            value = b'{"category":"%s","amount":%d,"ts":%d}' % (category.encode(), amount, ts)
            while True:
                try:
                    producer.produce(topic, value, category.encode(), partition=p, timestamp=ts)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(60) == 0
    return dict(expected)


def baseline(bootstrap: str, topic: str, n: int) -> tuple[float, dict[tuple[str, int], int]]:
    """The hand-written loop: consume, decode, add to a dict (no state store, no windows, no output)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": 10, "queued.min.messages": 10000, "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    sums: dict[tuple[str, int], int] = defaultdict(int)
    seen, eof = 0, set[int]()
    started = None
    loads = orjson.loads
    while len(eof) < PARTITIONS:
        for msg in consumer.consume(5000, timeout=1.0):
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                continue
            if started is None:
                started = time.perf_counter()
            value = loads(msg.value())
            ts = value["ts"]
            sums[(value["category"], ts - ts % MINUTE)] += value["amount"]
            seen += 1
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    sums.pop(("zz", FAR - FAR % MINUTE), None)
    assert seen == n + PARTITIONS
    return seen / elapsed, dict(sums)


def run_stylus(bootstrap: str, path: Path, n: int) -> tuple[float, dict[tuple[str, int], int]]:
    pipeline = load_pipeline(path)
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=2.0)
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False})
    thread.start()
    first = last = None
    total = n + PARTITIONS
    while thread.is_alive():
        worker = runner.workers.get("win")
        done = worker.processed if worker is not None else 0
        now = time.perf_counter()
        if first is None and done > 0:
            first = (now, done)
        if last is None and done >= total:
            last = now
        time.sleep(0.02)
    thread.join()
    assert not runner.errors, runner.errors
    assert first is not None and last is not None
    rate = (total - first[1]) / (last - first[0])
    out = read_topic(bootstrap, pipeline.processors["win"].outputs[0], timeout=120)
    sums = {}
    for msg in out:
        r = orjson.loads(msg.value() or b"null")
        if r["key"] != "zz":
            assert (r["key"], r["start"]) not in sums, "a window was emitted twice"
            sums[(r["key"], r["start"])] = r["value"]
    return rate, sums


def latency(bootstrap: str, path: Path, seconds: float, rate: int) -> list[float]:
    """Live input with event time = now; ms from each 1 s window's end to its result at a reader."""
    pipeline = load_pipeline(path)
    topic, out = pipeline.processors["win"].inputs[0], pipeline.processors["win"].outputs[0]
    runner = PipelineRunner(pipeline, bootstrap)
    runner.start()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex[:6]}",
                       "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10})
    reader.assign([TopicPartition(out, p, 0) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    delays: list[float] = []
    time.sleep(5)  # the group join
    stop = time.monotonic() + seconds
    warm = time.time() * 1000 + 5000  # windows ending in the first 5 s include the start-up: not counted
    i = 0
    while time.monotonic() < stop:
        now_ms = int(time.time() * 1000)
        category = CATEGORIES[i % (len(CATEGORIES) // PARTITIONS * PARTITIONS)]
        producer.produce(topic, b'{"category":"%s","amount":1,"ts":%d}' % (category.encode(), now_ms),
                         category.encode(), partition=CATEGORIES.index(category) % PARTITIONS, timestamp=now_ms)
        i += 1
        producer.poll(0)
        for msg in reader.consume(100, timeout=0):
            if msg.error() is None and (end := orjson.loads(msg.value())["end"]) >= warm:
                delays.append(time.time() * 1000 - end)
        time.sleep(1 / rate)
    producer.flush(10)
    runner.stop.set()
    time.sleep(3)
    reader.close()
    return delays


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--latency-only", action="store_true")
    args = parser.parse_args()
    n = args.records - args.records % PARTITIONS
    with EmbeddedBroker() as broker, TemporaryDirectory() as tmp:
        bootstrap = broker.bootstrap
        exact = True
        if not args.latency_only:
            exact = throughput(bootstrap, Path(tmp), n)
        live = pipeline_file(Path(tmp), "live", "1s", "0s")
        create_topics(bootstrap, pipeline_topics(load_pipeline(live)))
        delays = latency(bootstrap, live, args.latency_seconds, rate=2000)
        if delays:
            q = statistics.quantiles(delays, n=100)
            print(f"event-time latency (window end -> result at a reader), {len(delays)} results: "
                  f"p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms, max {max(delays):.0f} ms")
        if not exact:
            sys.exit(1)


def throughput(bootstrap: str, tmp: Path, n: int) -> bool:
    """The 1-minute tumbling sum vs the hand-written loop; True when every window is exact."""
    path = pipeline_file(tmp, "t", "1m", "60s")
    pipeline = load_pipeline(path)
    topic = pipeline.processors["win"].inputs[0]
    create_topics(bootstrap, pipeline_topics(pipeline))
    started = time.perf_counter()
    expected = produce(bootstrap, topic, n)
    print(f"produced {n:,} records in {time.perf_counter() - started:.1f}s; {len(expected)} windows")
    base_rate, base_sums = baseline(bootstrap, topic, n)
    assert base_sums == expected, "the baseline's sums are wrong"
    print(f"baseline confluent-kafka loop: {base_rate:,.0f} records/s (all {len(expected)} windows exact)")
    rate, sums = run_stylus(bootstrap, path, n)
    exact = sums == expected
    print(f"stylus windows:                {rate:,.0f} records/s = {rate / base_rate:.0%} of the loop "
          f"({'all windows exact' if exact else 'WRONG WINDOWS'})", flush=True)
    return exact


if __name__ == "__main__":
    main()
