"""Same code, same result: a stateful processor's final state and output multiset are the same when it
runs on the stream (`stylus run --exit-when-idle`) and as a Spark backfill over the same input."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.seed import seed_state, state_path
from stylus.config.model import Pipeline
from stylus.kafka.admin import create_topics
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw

WORDCOUNT = {
    "topics": {"words": {"partitions": 3}, "counts": {"partitions": 2}},
    "processors": {"count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                             "checkpoint": {"interval": "500ms"}}},
}
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")


def streaming_state(pipeline: Pipeline, name: str, topic: str, partitions: int) -> dict[tuple[str, int], dict]:
    out = {}
    for p in range(partitions):
        kv = RocksKV(state_path(pipeline, name, topic, p))
        try:
            out[(topic, p)] = {k[1:].decode(): orjson.loads(v) for k, v in kv.scan(b"s")}
            out[(topic, p), "offset"] = PartitionStore(kv).stored_offset()
        finally:
            kv.close()
    return out


def test_wordcount_stream_and_backfill_agree(bootstrap: str, pipeline_factory: Any, spark: Any,
                                             tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(WORDCOUNT)
    words_topic, counts_topic = list(pipeline.topics)
    rng = random.Random(7)
    words = [rng.choice(["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay"]) for _ in range(3000)]
    create_topics(bootstrap, dict(pipeline.topics))
    produce(bootstrap, words_topic, [(w, {"w": w}) for w in words])

    done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=120)
    assert done.returncode == 0, done.stderr
    live = streaming_state(pipeline, "count", words_topic, 3)
    live_out = Counter((m.key().decode(), m.value()) for m in read_raw(bootstrap, counts_topic))
    assert sum(live_out.values()) == 3000

    plan = plan_for(pipeline, "count", bootstrap, EARLIEST, LATEST, chunk_size=300)
    assert len(plan.units) == 3 and all(len(u.chunks) > 1 for u in plan.units)  # chunked, one task per partition
    result = run_plan(spark, pipeline, "count", plan, OutputTarget(kind="collect"), return_state=True)
    assert result.records == 3000 and result.outputs == {counts_topic: 3000}
    backfill_state = result.user_state()
    for p in range(3):
        assert backfill_state[(words_topic, p)] == live[(words_topic, p)]
        assert result.next_offsets[(words_topic, p)] == live[(words_topic, p), "offset"]
    assert sum(sum(s.values()) for s in backfill_state.values()) == 3000
    backfill_out = Counter((e.key, orjson.dumps(e.value)) for e in result.emitted)
    assert backfill_out == Counter((k, orjson.dumps(json.loads(v))) for k, v in live_out.elements())

    # into the processor's own output topic (`--output @outputs`, the engine's direct produce path): the
    # same records, byte for byte, and the same counts
    before = Counter(m.partition() for m in read_raw(bootstrap, counts_topic))
    to_topic = run_plan(spark, pipeline, "count", plan, OutputTarget(kind="outputs"))
    assert to_topic.records == 3000 and to_topic.outputs == {counts_topic: 3000}
    produced = Counter((m.key().decode(), m.value()) for m in read_raw(bootstrap, counts_topic)
                       if m.offset() >= before[m.partition()])
    assert produced == live_out

    # --seed-state: the backfill's state as a new processor's RocksDB, which then continues on the stream
    seeded_doc = json.loads(json.dumps(WORDCOUNT))
    _, fresh = pipeline_factory(seeded_doc)
    fresh = fresh.model_copy(update={"pipeline": fresh.pipeline + "-seeded", "topics": pipeline.topics,
                                     "processors": pipeline.processors})
    seed_state(fresh, "count", result.states)
    assert streaming_state(fresh, "count", words_topic, 3) == {
        **{(words_topic, p): live[(words_topic, p)] for p in range(3)},
        **{((words_topic, p), "offset"): live[(words_topic, p), "offset"] for p in range(3)},
    }
