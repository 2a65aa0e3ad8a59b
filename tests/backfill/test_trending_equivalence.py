"""Issue 6 equivalence on the paper's pipeline: `pipelines/trending_events.yaml` runs on the stream over
generated input, then each of its four processors is backfilled over the very input topic the stream
read. Every processor gives the same multiset of outputs, and the stateful ones (Scorer, Ranker) the
same final state and timers per input partition.

Why the outputs do not depend on batch boundaries here: the Scorer and Ranker take their watermark
from upstream control records (docs/event-time.md section 2), which the backfill reads in the same
offset order as the stream; a control record follows the data it covers, so no record is ever behind
it (nothing is late, no closed bucket is reopened; under load this once failed when an at-least-once
stage published a mark while an overlapped checkpoint still held the data it covered, see
stylus/eventtime/driver.py), and the last mark, the one that decides which
Ranker buckets are still open, is the same. The generated span (about 3 minutes of event time) stays
below the Scorer's `ttl` (10m): a key returning right after its TTL timer is the one case where the
Scorer's output depends on where a batch ends (docs/backfill.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import yaml

from processors.dimensions import DEFAULT_PATH
from processors.generator import GeneratorConfig
from processors.generator import produce as produce_events
from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.seed import state_path
from stylus.config.model import Pipeline
from stylus.kafka.admin import create_topics
from stylus.state.kv import RocksKV
from stylus.tables.load import load_rows, read_rows
from tests.support.cli import run_stylus
from tests.support.kafka import read_raw

ROOT = Path(__file__).resolve().parents[2]
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
RECORDS = 4000
RATE = 20.0  # records per second of event time: 200 s, about 7 Ranker buckets of 30 s


def trending_doc(state_dir: Path) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "pipelines" / "trending_events.yaml").read_text())
    for spec in doc["processors"].values():
        if "state" in spec:
            spec["state"]["dir"] = str(state_dir)
    return doc


Emitted = tuple[str | None, bytes, int]


def stream_outputs(bootstrap: str, topic: str) -> Counter[Emitted]:
    out: Counter[Emitted] = Counter()
    for m in read_raw(bootstrap, topic):
        key, value = m.key(), m.value()
        assert value is not None
        out[(None if key is None else key.decode(), orjson.dumps(orjson.loads(value)), m.timestamp()[1])] += 1
    return out


def stream_kv(pipeline: Pipeline, name: str, topic: str, partition: int) -> dict[bytes, bytes]:
    """User state (`s` keys) and timers (`t` keys) of the stream's RocksDB for one input partition."""
    kv = RocksKV(state_path(pipeline, name, topic, partition))
    try:
        return {k: v for prefix in (b"s", b"t") for k, v in kv.scan(prefix)}
    finally:
        kv.close()


def test_each_trending_processor_backfills_to_what_the_stream_did(
    bootstrap: str, pipeline_factory: Any, spark: Any, tmp_path: Path
) -> None:
    path, pipeline = pipeline_factory(trending_doc(tmp_path / "state"))
    create_topics(bootstrap, dict(pipeline.topics))
    load_rows(bootstrap, pipeline, "dims", read_rows(DEFAULT_PATH))  # the Joiner's table, loaded after the events'
    # timestamps: the backfill's lookups (as of each record's time) see each row's first version, as the stream did
    events = pipeline.processors["filterer"].inputs[0]
    produce_events(bootstrap, events, RECORDS, GeneratorConfig(seed=11, rate=RATE))
    done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=240)
    (tmp_path / "stream.log").write_text(done.stderr)  # the workers' log, for a failure's post-mortem
    assert done.returncode == 0, done.stderr

    for name in ("filterer", "joiner", "scorer", "ranker"):
        spec = pipeline.processors[name]
        source, output = spec.inputs[0], spec.outputs[0]
        live = stream_outputs(bootstrap, output)
        plan = plan_for(pipeline, name, bootstrap, EARLIEST, LATEST, chunk_size=700)
        result = run_plan(spark, pipeline, name, plan, OutputTarget(kind="collect"), return_state=spec.stateful)
        backfilled = Counter((e.key, orjson.dumps(e.value), e.timestamp) for e in result.emitted)
        assert sum(live.values()) > 0, name
        assert backfilled == live, (name, sum(backfilled.values()), sum(live.values()), done.stderr[-2000:],
                                    list((backfilled - live).items())[:2], list((live - backfilled).items())[:2])
        if name == "joiner":  # the lookups found the rows, in the stream and (equal above) in the backfill
            assert all(orjson.loads(value)["country"] is not None for _, value, _ in live), name
        if not spec.stateful:
            continue
        for p in range(pipeline.topics[source].partitions):
            mine = {k: v for k, v in result.states[(source, p)].items() if k[:1] in (b"s", b"t")}
            assert mine == stream_kv(pipeline, name, source, p), (name, p)
        if name == "ranker":  # some buckets were closed by the watermark (finals), the newest are still open
            finals = [e for e in result.emitted if e.value["final"]]
            assert finals and any(k.startswith(b"t") for kv in result.states.values() for k in kv)
