"""Issue 5 item 6: the trending pipeline's Scorer and Ranker on `stylus.windows`, records/s through the
real Engine over real RocksDB state (no broker: this measures the processors, not Kafka).

    .venv/bin/python -m bench.trending_windows --records 200000

Input: the generator at 1000 events/s of event time with one burst, classified as the Joiner does,
on one input partition. The watermark trails the newest event time by 5 s (the scorer's
`allowed_lateness`) and moves after every batch of 5000 records; state is saved every 10 batches.
Rates are records per CPU second of the process (the machine is shared; wall time swings with load).
The Ranker then reads the Scorer's output the same way. `--scorer`/`--ranker` (module:Class) and
`--scorer-config`/`--ranker-config` (JSON) run another implementation for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from processors.generator import Burst, GeneratorConfig, generate, pick_event  # noqa: E402
from processors.trending import classify  # noqa: E402
from stylus.api import import_processor_class  # noqa: E402
from stylus.config import load_pipeline  # noqa: E402
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage  # noqa: E402
from stylus.state.kv import RocksKV  # noqa: E402
from stylus.state.store import PartitionStore  # noqa: E402

START = 1_700_000_010_000
BATCH = 5000
LAG = 5000


def run_stage(name: str, cls: str | None, config: dict[str, Any] | None, records: list[dict[str, Any]],
              key_field: str, state_dir: Path) -> tuple[float, list[Any]]:
    """CPU seconds spent processing `records` (and firing timers), and the values emitted. CPU time, not
    wall time: the machine is shared, and the stage runs on one thread."""
    pipeline = load_pipeline(ROOT / "pipelines" / "trending_events.yaml")
    spec = pipeline.processors[name]
    spec = spec.model_copy(update={"class_": cls or spec.class_,
                                   "config": config if config is not None else spec.config})
    sink = CollectingSink(spec.outputs)
    processor = import_processor_class(spec.class_)(config=spec.config, name=name)
    engine = Engine(processor, name, spec, pipeline, sink, RaiseFailures())
    engine.start()
    topic = spec.inputs[0]
    kv = RocksKV(str(state_dir / name))
    task = PartitionTask(topic, 0, PartitionStore(kv))
    msgs = [RawMessage(topic, 0, i, str(r[key_field]).encode(), orjson.dumps(r), r["ts"])
            for i, r in enumerate(records)]
    began = time.process_time()
    for n, i in enumerate(range(0, len(msgs), BATCH)):
        engine.process_messages(msgs[i:i + BATCH], lambda t, p: task)
        engine.fire_timers([task], max(r["ts"] for r in records[i:i + BATCH]) - LAG)
        if n % 10 == 9:
            task.store.save(task.next_offset)  # type: ignore[union-attr]
    engine.fire_timers([task], 2**62)
    task.store.save(task.next_offset)  # type: ignore[union-attr]
    seconds = time.process_time() - began
    kv.close()
    return seconds, [o.value for o in sink.outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--scorer", default=None)
    parser.add_argument("--ranker", default=None)
    parser.add_argument("--scorer-config", type=json.loads, default=None)
    parser.add_argument("--ranker-config", type=json.loads, default=None)
    args = parser.parse_args()

    event = pick_event("music", 100)
    burst = Burst(event, START + args.records // 2, 30_000, 100.0)  # halfway through (1000 events/s)
    raw = generate(args.records, GeneratorConfig(rate=1000, start_ms=START, bursts=(burst,)))
    joined = [{"event_id": r["event_id"], "topic": classify(r["text"]), "ts": r["ts"]} for r in raw]
    with TemporaryDirectory(prefix="bench-trending-") as tmp:
        s_secs, scored = run_stage("scorer", args.scorer, args.scorer_config, joined, "event_id", Path(tmp))
        r_secs, ranked = run_stage("ranker", args.ranker, args.ranker_config, scored, "topic", Path(tmp))
    finals = {(r["topic"], r["bucket_start"]): r for r in ranked if r["final"]}
    bucket = burst.start - burst.start % 30_000
    leader = finals[("music", bucket)]["top"][0]
    print(f"scorer: {len(joined)} records in {s_secs:.2f} CPU s = {len(joined) / s_secs:,.0f} records/s "
          f"({len(scored)} scores)")
    print(f"ranker: {len(scored)} records in {r_secs:.2f} CPU s = {len(scored) / r_secs:,.0f} records/s "
          f"({len(ranked)} rankings, {len(finals)} final)")
    print(f"burst {event}: leads music {bucket - START} ms into the run: {leader['event_id'] == event} "
          f"(score {leader['score']})")


if __name__ == "__main__":
    main()
