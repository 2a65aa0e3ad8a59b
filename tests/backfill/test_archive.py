"""The archive: the archiver writes exact, idempotent Parquet segments, and backfill reprocesses history
that is gone from Kafka (deleted and recreated topic) from them, without double counting overlaps."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from stylus.archive import (
    SCHEMA,
    SegmentSlice,
    list_segments,
    read_segment,
    read_segment_batches,
    read_segment_slices,
    segment_name,
    write_segment,
)
from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for, run_plan
from stylus.backfill.plan import Chunk, Unit
from stylus.backfill.read import read_unit_batches
from stylus.config import load_pipeline
from stylus.core.batch.columns import Run
from stylus.core.engine import Engine, RaiseFailures
from stylus.core.message import RawMessage
from stylus.core.sink import CollectingSink
from stylus.core.task import PartitionTask
from stylus.kafka.admin import create_topics, delete_topics
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.support.cli import run_stylus

MIDNIGHT = 1_714_608_000_000  # 2024-05-02T00:00:00Z: the records straddle two dates
EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")


def doc(archive: Path) -> dict[str, Any]:
    return {
        "topics": {"events": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {
            "archiver": {"class": "processors.archiver:Archiver", "inputs": ["events"],
                         "semantics": {"state": "exactly_once", "output": "at_least_once"},
                         "config": {"path": str(archive), "flush_records": 150}},
            "count": {"class": "tests.apps.counting:WordCount", "inputs": ["events"], "outputs": ["counts"]},
        },
    }


def produce_events(bootstrap: str, topic: str, n: int) -> Counter[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    keys: Counter[str] = Counter()
    for i in range(n):
        key = f"w{i % 13}"
        keys[key] += 1
        producer.produce(topic, f'{{"i": {i}}}'.encode(), key.encode(), partition=i % 2,
                         timestamp=MIDNIGHT - 60_000 + i * 100, headers=[("h", str(i).encode())])
    assert producer.flush(30) == 0
    return keys


def test_archiver_rerun_rewrites_the_same_files(tmp_path: Path) -> None:
    """Same input twice from scratch (a crash that lost the archiver's state): same file set, no duplicates."""
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"pipeline": "arch", **doc(tmp_path / "archive")}))
    pipeline = load_pipeline(path)
    msgs = [RawMessage("events", 0, o, b"k", b"v%d" % o, MIDNIGHT - 30_000 + o * 100, [("h", b"x")])
            for o in range(700)]
    for _ in range(2):
        from processors.archiver import Archiver

        proc = Archiver(config=pipeline.processors["archiver"].config, name="archiver")
        engine = Engine(proc, "archiver", pipeline.processors["archiver"], pipeline, CollectingSink(()),
                        RaiseFailures())
        engine.start()
        task = PartitionTask("events", 0, PartitionStore(MemoryKV()))
        for i in range(0, 700, 64):
            engine.process_messages(msgs[i:i + 64], lambda t, p, task=task: task)
        proc.close()
    segments = list_segments(str(tmp_path / "archive"), "events")
    assert {s.date for s in segments} == {"2024-05-01", "2024-05-02"}
    offsets = [m.offset() for s in segments for m in read_segment(str(tmp_path / "archive"), s.path)]
    assert sorted(offsets) == list(range(700))  # every record once: re-runs overwrote, never duplicated
    first = next(read_segment(str(tmp_path / "archive"), segments[0].path))
    assert (first.key(), first.value(), first.headers()) == (b"k", b"v0", [("h", b"x")])


def fields(msg: Any) -> tuple[Any, ...]:
    return (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp(), msg.headers())


@pytest.mark.parametrize(("start", "end", "batch"), [(0, 2**63 - 1, 7), (13, 31, 4), (13, 14, 10), (0, 10, 3),
                                                      (40, 50, 5), (33, 33, 5)])
def test_a_segment_is_read_exactly_within_its_range(tmp_path: Path, start: int, end: int, batch: int) -> None:
    """Offsets 10..39 with a gap (20 missing): exactly the offsets in [start, end), in order, in lists of at most
    `batch`, every field as written (headers on some records only)."""
    offsets = [o for o in range(10, 40) if o != 20]
    msgs = [RawMessage("events", 3, o, None if o % 5 == 0 else b"k%d" % o, b"v%d" % o, MIDNIGHT + o,
                       [("h", b"%d" % o)] if o % 4 == 0 else None) for o in offsets]
    segment = write_segment(str(tmp_path), "events", 3, msgs)
    batches = list(read_segment_batches(str(tmp_path), segment.path, start, end, batch))
    assert all(0 < len(b) <= batch for b in batches)
    assert [fields(m) for b in batches for m in b] == [fields(m) for m in msgs if start <= m.offset() < end]


def test_a_segment_written_out_of_order_or_with_mixed_rows_is_read_in_offset_order(tmp_path: Path) -> None:
    """A file not written by `write_segment` (rows out of offset order; rows whose partition differs): read in
    offset order, each row with its own values."""
    rows = [("events", o % 2, o, MIDNIGHT, b"k", b"v%d" % o, None) for o in (5, 1, 4, 2, 3, 0)]  # SCHEMA order
    table = pa.Table.from_pydict({name: [r[i] for r in rows] for i, name in enumerate(SCHEMA.names)}, schema=SCHEMA)
    path = tmp_path / "topic=events" / "date=2024-05-02" / segment_name(0, 0, 5)
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    read = [fields(m) for b in read_segment_batches(str(tmp_path), str(path), 1, 5, 2) for m in b]
    assert read == [("events", o % 2, o, b"k", b"v%d" % o, (1, MIDNIGHT), None) for o in (1, 2, 3, 4)]
    # as columns, such a slice names no one partition: a batch processor's task takes its rows as messages
    assert [part.source() for part in read_segment_slices(str(tmp_path), str(path), 1, 5, 2)] == [None, None]
    assert [part.source() for part in read_segment_slices(str(tmp_path), str(path), 2, 3, 2)] == [("events", 0)]


def test_reading_a_segment_does_not_import_pandas(tmp_path: Path) -> None:
    """pandas costs a fresh Spark Python worker ~0.5 s to import (pyarrow's `read_table`, or an Arrow compute
    call with a Python scalar, would import it): a backfill task reading the archive must not pay that."""
    rows = [RawMessage("events", 0, o, b"k", b"v", MIDNIGHT) for o in range(9)]
    segment = write_segment(str(tmp_path), "events", 0, rows)
    script = ("import sys; from stylus.archive import read_segment_batches; "
              f"n = sum(map(len, read_segment_batches({str(tmp_path)!r}, {segment.path!r}, 2, 7))); "
              "print(n, 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["5", "False"]


def test_history_gone_from_kafka_is_reprocessed_from_parquet(bootstrap: str, pipeline_factory: Any, spark: Any,
                                                             tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    path, pipeline = pipeline_factory(doc(archive))
    events = next(t for t in pipeline.topics if t.startswith("events"))
    create_topics(bootstrap, dict(pipeline.topics))
    expected = produce_events(bootstrap, events, 1000)
    done = run_stylus("run", str(path), "--processor", "archiver", "--exit-when-idle", "1", bootstrap=bootstrap)
    assert done.returncode == 0, done.stderr
    segments = list_segments(str(archive), events)
    assert len({s.date for s in segments}) == 2 and len(segments) >= 8
    archived = Counter((m.partition(), m.offset()) for s in segments for m in read_segment(str(archive), s.path))
    assert len(archived) == 1000 and set(archived.values()) == {1}

    def counts(source: str) -> tuple[int, Counter[str]]:
        plan = plan_for(pipeline, "count", bootstrap, EARLIEST, LATEST, source=source,  # type: ignore[arg-type]
                        archive_root=str(archive), chunk_size=100)
        result = run_plan(spark, pipeline, "count", plan, return_state=True)
        total: Counter[str] = Counter()
        for state in result.user_state().values():
            total.update(state)
        return result.records, total

    # Kafka and archive overlap completely: read once each, not twice
    assert counts("both") == (1000, expected)
    delete_topics(bootstrap, [events])
    create_topics(bootstrap, {events: pipeline.topics[events]})  # history gone, as after retention
    assert counts("kafka") == (0, Counter())
    assert counts("archive") == (1000, expected)
    assert counts("both") == (1000, expected)
    # a time range over the archive: only the records of the second date
    plan = plan_for(pipeline, "count", bootstrap, parse_bound("2024-05-02", default="earliest"), LATEST,
                    source="archive", archive_root=str(archive))
    assert run_plan(spark, pipeline, "count", plan).records == 1000 - 600


@pytest.mark.parametrize(("min_ts", "max_ts"), [(None, None), (MIDNIGHT + 15, MIDNIGHT + 33)])
def test_a_unit_read_as_columns_holds_the_records_the_messages_hold(tmp_path: Path, min_ts: int | None,
                                                                    max_ts: int | None) -> None:
    """Two archive files that overlap (10..29 and 20..44): each offset once, the first copy winning, within the
    time bounds; as columns (a batch processor's `Run`) the same records, field for field, as the messages."""
    def msg(o: int, copy: str) -> RawMessage:
        return RawMessage("events", 1, o, b"k%d" % o, b"%s%d" % (copy.encode(), o), MIDNIGHT + o,
                          [("h", b"%d" % o)] if o % 3 == 0 else None)

    first = write_segment(str(tmp_path), "events", 1, [msg(o, "a") for o in range(10, 30)])
    second = write_segment(str(tmp_path), "events", 1, [msg(o, "b") for o in range(20, 45)])
    unit = Unit(index=0, topic="events", partition=1, min_ts=min_ts, max_ts=max_ts, next_offset=45,
                chunks=(Chunk(source="archive", topic="events", partition=1, start=10, end=30, path=first.path),
                        Chunk(source="archive", topic="events", partition=1, start=10, end=45, path=second.path)))
    as_messages = [fields(m) for part in read_unit_batches(unit, "unused:1", str(tmp_path), 7) for m in part]
    as_columns = []
    for part in read_unit_batches(unit, "unused:1", str(tmp_path), 7, columns=True):
        assert isinstance(part, SegmentSlice) and 0 < len(part.offsets) <= 7
        source = part.source()
        assert source == ("events", 1)
        keys, values, stamps, headers = part.columns()
        run = Run.of_columns(*source, part.offsets, keys, values, stamps, headers)
        as_columns += [fields(run.message(i)) for i in range(len(run))]
    low, high = min_ts or 0, max_ts or 2**63
    expected = [fields(msg(o, "a" if o < 30 else "b")) for o in range(10, 45) if low <= MIDNIGHT + o < high]
    assert as_messages == expected and as_columns == expected
