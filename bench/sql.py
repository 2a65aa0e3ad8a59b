"""Issue 30: what a SQL app costs per record against a hand-written processor doing the same, on the engine.

    .venv/bin/python -m bench.sql --records 200000 --repeat 5 [--app figure2|projection]

Both sides run through the same `Engine.process_messages` as a worker: the same in-memory input messages
(JSON values, event time in the value, in order), local RocksDB state saved every 50 batches as a checkpoint
would (the windowed app), the watermark advanced after every batch (windows close and emit), a producer that
only queues. They differ only in the processor:
- figure2: the paper's Figure 2 (the top 10 events per category by score in 5-minute tumbling windows, one row
  per ranked event when a window closes). sql: `pipelines/apps/top_events.sql` as the loader compiles it
  (`stylus.sql.stage:SqlWindowStage`); hand: `HandTopEvents` below, a `WindowedProcessor` configured as one
  would by hand (tumbling 5m, top_k by score of event per category: the window package's fast path) whose
  `emit_window` writes the same rows.
- projection: `SELECT event, category, score * 2 AS doubled FROM events_score WHERE score > 50` (stateless);
  hand: `HandProjection` below.
The two outputs are checked equal. Runs alternate; each figure is thread CPU per record, the median.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml
from confluent_kafka import Producer

from stylus.api import Context, Processor, Record, import_processor_class
from stylus.config import load_pipeline
from stylus.config.model import Pipeline
from stylus.core.engine import Engine, RaiseFailures
from stylus.core.message import RawMessage
from stylus.core.task import PartitionTask
from stylus.runtime.sink import KafkaSink
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from stylus.windows import WindowedProcessor

ROOT = Path(__file__).resolve().parents[1]
BATCH = 2000
BASE = 1_700_000_100_000 - 1_700_000_100_000 % 300_000


class HandTopEvents(WindowedProcessor):
    """Figure 2 by hand: top 10 events per category by score per 5-minute window, one row per event."""

    def emit_window(self, ctx: Context, key: str, start: int, end: int, acc: Any, *, final: bool,
                    late: bool) -> None:
        for score, event in acc:
            ctx.emit({"category": key, "event": event, "score": score, "window_start": start, "window_end": end},
                     key=key, timestamp=end - 1)


class HandProjection(Processor):
    """The projection by hand: the filter and the three columns, as one would write them."""

    def process(self, record: Record, ctx: Context) -> None:
        v = record.value
        score = v.get("score")
        if score is not None and score > 50:
            ctx.emit({"event": v.get("event"), "category": v.get("category"), "doubled": score * 2}, key=record.key)


PROJECTION = """CREATE INPUT TABLE events_score(event_time, event, category, score)
  FROM KAFKA('events_stream') TIME event_time;
CREATE TABLE top_events_5min AS
  SELECT event, category, score * 2 AS doubled FROM events_score WHERE score > 50;
"""


def pipelines(tmp: Path, app: str) -> dict[str, Pipeline]:
    common = {"semantics": {"state": "exactly_once", "output": "at_least_once"},
              "event_time": {"allowed_lateness": "30s"}, "state": {"dir": str(tmp / "state")}}
    topics = {"events_stream": {"partitions": 1}, "top_events_5min": {"partitions": 1}}
    (tmp / "apps").mkdir(exist_ok=True)
    (tmp / "apps" / "top_events.sql").write_text((ROOT / "pipelines" / "apps" / "top_events.sql").read_text()
                                                 if app == "figure2" else PROJECTION)
    sql = {"pipeline": "bench-sql", "topics": topics, "processors": {"p": {"sql": "apps/top_events.sql", **common}}}
    hand = {"pipeline": "bench-hand", "topics": topics, "processors": {"p": {
        "class": "bench.sql:HandTopEvents", "inputs": ["events_stream"], "outputs": ["top_events_5min"],
        "config": {"window": {"type": "tumbling", "size": "5m"}, "key": "category",
                   "aggregate": {"type": "top_k", "k": 10, "by": "score", "item": "event"}},
        **{**common, "event_time": {"field": "event_time", "allowed_lateness": "30s"}}}}}
    if app == "projection":  # stateless both: the SQL stage keeps only `output`; so does this one
        hand = {"pipeline": "bench-hand", "topics": topics, "processors": {"p": {
            "class": "bench.sql:HandProjection", "inputs": ["events_stream"], "outputs": ["top_events_5min"],
            "semantics": {"output": "at_least_once"}}}}
    out = {}
    for name, doc in (("sql", sql), ("hand", hand)):
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out[name] = load_pipeline(path)
    return out


def messages(records: int, seed: int = 1) -> list[RawMessage]:
    rng = random.Random(seed)
    categories = [f"c{i:02d}" for i in range(20)]
    events = [f"e{i:03d}" for i in range(200)]
    out = []
    t = BASE
    for offset in range(records):
        t += rng.randint(0, 60)  # ~30 ms apart: ~10,000 records per 5-minute window
        value = {"event_time": t, "event": rng.choice(events), "category": rng.choice(categories),
                 "score": round(rng.random() * 100, 2)}
        out.append(RawMessage("events_stream", 0, offset, None, orjson.dumps(value), t))
    return out


def queue_only_producer() -> Producer:
    return Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2_000_000,
                     "queue.buffering.max.kbytes": 2_000_000, "linger.ms": 60_000, "log_level": 0})


def run(pipeline: Pipeline, msgs: list[RawMessage], state_dir: Path) -> float:
    """Thread CPU per record (ns) of one run through the engine."""
    spec = pipeline.processors["p"]
    processor = import_processor_class(spec.class_)(config=spec.config, name="p")
    producer = queue_only_producer()
    sink = KafkaSink(producer, pipeline, spec.outputs, hold=False)
    engine = Engine(processor, "p", spec, pipeline, sink, RaiseFailures())
    engine.start()
    kv = RocksKV(state_dir)
    store = PartitionStore(kv, cache_entries=spec.state.cache_entries) if spec.stateful else None
    task = PartitionTask("events_stream", 0, store)
    batches = [msgs[i:i + BATCH] for i in range(0, len(msgs), BATCH)]
    gc.collect()
    started = time.thread_time()
    try:
        for i, batch in enumerate(batches):
            engine.process_messages(batch, lambda topic, partition: task)
            task.at_eof = True
            engine.advance_time([task])
            if i % 50 == 49 and store is not None:
                store.save(task.next_offset)
        if store is not None:
            store.save(task.next_offset)
        elapsed = time.thread_time() - started
    finally:
        kv.close()
    producer.purge()
    return elapsed / len(msgs) * 1e9


def outputs(pipeline: Pipeline, msgs: list[RawMessage], state_dir: Path) -> list[Any]:
    """The rows each side emits, through a collecting sink (not timed)."""
    from stylus.core.sink import CollectingSink

    spec = pipeline.processors["p"]
    processor = import_processor_class(spec.class_)(config=spec.config, name="p")
    sink = CollectingSink(spec.outputs)
    engine = Engine(processor, "p", spec, pipeline, sink, RaiseFailures())
    engine.start()
    kv = RocksKV(state_dir)
    task = PartitionTask("events_stream", 0, PartitionStore(kv) if spec.stateful else None)
    try:
        for i in range(0, len(msgs), BATCH):
            engine.process_messages(msgs[i:i + BATCH], lambda topic, partition: task)
            task.at_eof = True
            engine.advance_time([task])
    finally:
        kv.close()
    return [(o.key, o.value, o.timestamp) for o in sink.outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--app", choices=["figure2", "projection"], default="figure2")
    args = parser.parse_args()
    msgs = messages(args.records)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        sides = pipelines(tmp, args.app)
        check = {name: outputs(p, msgs, tmp / f"check-{name}") for name, p in sides.items()}
        assert check["sql"] == check["hand"] and check["sql"], "the SQL app and the hand-written one differ"
        figures: dict[str, list[float]] = {name: [] for name in sides}
        for round_ in range(args.repeat):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                figures[name].append(run(sides[name], msgs, tmp / f"{name}-{round_}"))
    sql, hand = statistics.median(figures["sql"]), statistics.median(figures["hand"])
    print(f"{args.app}: {args.records} records, {len(check['sql'])} output rows, {args.repeat} runs each "
          "(median, range)")
    for name in ("hand", "sql"):
        print(f"  {name:5} {statistics.median(figures[name]):7.0f} ns/record "
              f"({min(figures[name]):.0f}-{max(figures[name]):.0f})  "
              f"{1e9 / statistics.median(figures[name]):,.0f} records/s per core")
    print(f"  sql / hand: {sql / hand:.3f} (+{(sql / hand - 1) * 100:.1f}% CPU per record)")


if __name__ == "__main__":
    main()
