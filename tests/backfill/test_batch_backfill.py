"""A batch processor on Spark (`mapInArrow`, the batch engine in the task) gives the stream's state and outputs,
reading the input from Kafka or from the Parquet archive."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from stylus.archive import write_segment
from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.kafka.admin import create_topics
from tests.backfill.test_equivalence import streaming_state
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw

TOTALS = {
    "topics": {"events": {"partitions": 3}, "totals": {"partitions": 2}},
    "processors": {"totals": {"class": "tests.apps.batch:RunningTotals", "inputs": ["events"],
                              "outputs": ["totals"], "batch_size": 400,
                              "semantics": {"state": "exactly_once", "output": "at_least_once"},
                              "checkpoint": {"interval": "500ms"}}},
}
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")


def test_batch_processor_backfill_equals_the_stream(bootstrap: str, pipeline_factory: Any, spark: Any,
                                                    tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(TOTALS)
    events, totals = list(pipeline.topics)
    rng = random.Random(11)
    create_topics(bootstrap, dict(pipeline.topics))
    produce(bootstrap, events, [(f"k{rng.randrange(40)}", {"n": rng.randrange(1000)}) for _ in range(4000)])

    done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=180)
    assert done.returncode == 0, done.stderr
    live = streaming_state(pipeline, "totals", events, 3)
    live_out = Counter((m.key().decode(), orjson.dumps(orjson.loads(m.value()))) for m in read_raw(bootstrap, totals))
    assert sum(live_out.values()) == 4000

    archive = tmp_path / "archive"
    by_partition: dict[int, list[Any]] = {}
    for msg in read_raw(bootstrap, events):
        by_partition.setdefault(msg.partition(), []).append(msg)
    for partition, msgs in by_partition.items():
        write_segment(str(archive), events, partition, msgs)

    for source in ("kafka", "archive"):
        plan = plan_for(pipeline, "totals", bootstrap, EARLIEST, LATEST, source=source,  # type: ignore[arg-type]
                        archive_root=str(archive), chunk_size=500)
        assert len(plan.units) == 3  # stateful: one task per input partition, its chunks in order
        result = run_plan(spark, pipeline, "totals", plan, OutputTarget(kind="collect"), return_state=True)
        assert result.mode == "batch" and result.records == 4000, source
        state = result.user_state()
        for p in range(3):
            assert state[(events, p)] == live[(events, p)], source
            assert result.next_offsets[(events, p)] == live[(events, p), "offset"]
        assert Counter((e.key, orjson.dumps(e.value)) for e in result.emitted) == live_out, source
    # from the archive to Parquet: records in as columns, outputs out as columns (no object per record)
    plan = plan_for(pipeline, "totals", bootstrap, EARLIEST, LATEST, source="archive", archive_root=str(archive),
                    chunk_size=500)
    result = run_plan(spark, pipeline, "totals", plan, OutputTarget(kind="parquet", path=str(tmp_path / "out")))
    assert result.records == 4000 and result.outputs == {totals: 4000}
    files = sorted((tmp_path / "out").glob("part-*.parquet"))
    written = pa.concat_tables([pq.read_table(f) for f in files])
    assert set(written.column("topic").to_pylist()) == {totals}
    assert Counter((k, orjson.dumps(orjson.loads(v))) for k, v in zip(written.column("key").to_pylist(),
                                                                       written.column("value").to_pylist(),
                                                                       strict=True)) == live_out
