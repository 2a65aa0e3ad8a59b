"""The batch engine without a broker: the batch a processor gets, what `emit_batch` and `forward` write, bisection
of a failing batch with its state writes and timers undone, records that do not decode, control records, late
rows, bulk state, and the per-record engine's behaviour kept where the batch engine shares it."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer

from stylus import BatchProcessor
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RawMessage
from stylus.core.batch import json_columns
from stylus.core.batch.columns import Run
from stylus.core.batch.engine import BatchEngine
from stylus.core.engines import engine_for
from stylus.eventtime.clock import clock_of
from stylus.eventtime.control import HEADERS as CONTROL_HEADERS
from stylus.eventtime.sketch import LatenessSketch
from stylus.runtime.sink import KafkaSink
from stylus.state.kv import MemoryKV, RocksKV
from stylus.state.store import PartitionStore, StateMap
from stylus.testing import TestDriver
from tests.apps.batch import Poison, RunningTotalsPerRecord
from tests.core.test_engine_failures import Recorder

DOC = """
pipeline: b
topics: {{in: {{partitions: 1}}, out: {{partitions: 1, serde: {serde}}}}}
processors:
  p:
    class: {cls}
    inputs: [in]
    outputs: [out]
    semantics: {{state: exactly_once, output: at_least_once}}
{extra}
"""


class Seen(BatchProcessor):
    """Keeps every batch it is handed; emits each batch whole (`emit_batch`) or forwards it."""

    forward = False

    def __init__(self, config: Any = None, name: str = "") -> None:
        super().__init__(config, name)
        self.batches: list[pa.RecordBatch] = []

    def process_batch(self, batch: Any, ctx: Any) -> None:
        self.batches.append(batch)
        if self.forward:
            ctx.forward(batch)
        else:
            ctx.emit_batch(batch, key="key")


class TimerThenFail(BatchProcessor):
    """Sets a timer per row and writes state, then fails a batch holding a `fail` row."""

    def process_batch(self, batch: Any, ctx: Any) -> None:
        for offset in batch.column("offset").to_pylist():
            ctx.set_timer(f"t{offset}", 5_000)
        ctx.state.set_many({f"o{o}": 1 for o in batch.column("offset").to_pylist()})
        if "fail" in batch.column_names and pc.any(pc.fill_null(batch.column("fail"), False)).as_py():
            raise ValueError("fail")


def setup(processor: BatchProcessor, *, serde: str = "json", extra: str = "", failures: Any = None,
          ) -> tuple[Pipeline, BatchEngine, CollectingSink, PartitionTask]:
    pipeline = parse_pipeline(DOC.format(cls="tests.apps.batch:Keep", serde=serde, extra=extra))
    sink = CollectingSink(["out"])
    engine = engine_for(processor, "p", pipeline.processors["p"], pipeline, sink, failures or Recorder())
    assert isinstance(engine, BatchEngine)
    engine.start()
    return pipeline, engine, sink, PartitionTask("in", 0, PartitionStore(MemoryKV()))


def messages(values: list[Any], *, raw: bool = False, start: int = 0, key: str | None = "k") -> list[RawMessage]:
    return [RawMessage("in", 0, start + i, None if key is None else key.encode(),
                       v if raw else orjson.dumps(v), 1000 + i) for i, v in enumerate(values)]


def test_the_batch_holds_metadata_and_one_column_per_field() -> None:
    processor = Seen()
    _, engine, sink, task = setup(processor)
    values = [{"a": 1, "b": "x"}, {"a": 2, "c": [1, 2]}, None, {"key": "field named key", "a": 3, "b": "é"}]
    engine.process_messages(messages(values), lambda t, p: task)
    (batch,) = processor.batches
    assert batch.column_names == ["key", "timestamp", "offset", "headers", "a", "b", "c", "value.key"]
    assert batch.column("offset").to_pylist() == [0, 1, 2, 3]
    assert batch.column("timestamp").to_pylist() == [1000, 1001, 1002, 1003]
    assert batch.column("a").to_pylist() == [1, 2, None, 3]
    assert batch.column("c").to_pylist() == [None, [1, 2], None, None]
    # emit_batch of the batch itself: the values again (metadata left out, `value.key` named `key`)
    assert [o.value for o in sink.outputs] == [
        {"a": 1, "b": "x", "c": None, "key": None}, {"a": 2, "b": None, "c": [1, 2], "key": None},
        {"a": None, "b": None, "c": None, "key": None}, {"a": 3, "b": "é", "c": None, "key": "field named key"}]
    assert [(o.key, o.timestamp) for o in sink.outputs] == [("k", 1000), ("k", 1001), ("k", 1002), ("k", 1003)]


def test_values_that_are_not_objects_are_one_value_column_and_mixed_kinds_are_json_text() -> None:
    processor = Seen()
    _, engine, _, task = setup(processor)
    engine.process_messages(messages([1, "two", [3]]), lambda t, p: task)
    engine.process_messages(messages([{"v": 1}, {"v": "one"}, {"v": None}], start=3), lambda t, p: task)
    assert processor.batches[0].column("value").to_pylist() == ["1", '"two"', "[3]"]
    assert processor.batches[1].column("v").to_pylist() == ["1", '"one"', None]


def test_fields_narrow_the_decoded_columns() -> None:
    processor = Seen()
    processor.fields = ("b", "missing")
    _, engine, _, task = setup(processor)
    engine.process_messages(messages([{"a": 1, "b": 2}]), lambda t, p: task)
    assert processor.batches[0].column_names[4:] == ["b", "missing"]


@pytest.mark.parametrize(("encoder", "copies"), [("c", 1), ("c", 300), ("orjson", 1), ("polars", 300)])
def test_emit_batch_encodes_as_orjson_does(encoder: str, copies: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """In C (`json_columns`), or without it: a small table through orjson, a big one through Polars."""
    if encoder == "c":
        assert json_columns.available(), "`make install` builds the C encoder (scripts/build-native.sh)"
    else:
        monkeypatch.setattr(json_columns, "_json_columns", None)
    rows = {"i": [1, -2**62, 0], "f": [0.1, 1e20, -0.0], "s": ["a\"\\\n", "ü\u2028\x01", ""],
            "b": [True, None, False], "l": [[1, 2], None, []], "st": [{"x": 1}, {"x": None}, None]}
    rows = {name: column * copies for name, column in rows.items()}
    keys = [7, None, 8] * copies

    class Emit(BatchProcessor):
        def process_batch(self, batch: Any, ctx: Any) -> None:
            ctx.emit_batch(pa.table(rows), key=pa.array(keys), timestamp=42)

    pipeline = parse_pipeline(DOC.format(cls="tests.apps.batch:Keep", serde="json", extra=""))
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 60_000, "log_level": 0})
    sink = KafkaSink(producer, pipeline, ("out",), hold=True)  # held: the encoded bytes can be read
    engine = engine_for(Emit(), "p", pipeline.processors["p"], pipeline, sink, Recorder())
    engine.process_messages(messages([{}]), lambda t, p: PartitionTask("in", 0, None))
    expected = [dict(zip(rows, r, strict=True)) for r in zip(*rows.values(), strict=True)]
    assert [item[1] for item in sink.held] == [orjson.dumps(e) for e in expected]  # byte for byte
    assert [(item[2], item[6]) for item in sink.held] == [(None if k is None else str(k).encode(), 42) for k in keys]


def test_a_string_topic_takes_one_value_column() -> None:
    class Emit(BatchProcessor):
        def process_batch(self, batch: Any, ctx: Any) -> None:
            ctx.emit_batch(batch.select(["key", "timestamp", "word"]))

    _, engine, sink, task = setup(Emit(), serde="string")
    engine.process_messages(messages([{"word": "a"}, {"word": "b"}]), lambda t, p: task)
    assert [o.value for o in sink.outputs] == ["a", "b"]


def test_forward_emits_the_records_as_read_across_offset_gaps() -> None:
    processor = Seen()
    processor.forward = True
    _, engine, sink, task = setup(processor)
    msgs = messages([b'{"a" : 1}', b'{"a":2}', b'{"a":3}'], raw=True)
    msgs[2] = RawMessage("in", 0, 10, b"k", b'{"a":3}', 1002)  # a gap (a transaction's marker, compaction)
    engine.process_messages(msgs, lambda t, p: task)
    assert [o.value for o in sink.outputs] == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert task.next_offset == 11


class ForwardMask(BatchProcessor):
    """Forwards the rows whose `n` is even, by a mask of the kind `kind` names (a null `n` is a null in the mask:
    not forwarded); fails a batch holding a `fail` row."""

    kind = "arrow"

    def process_batch(self, batch: Any, ctx: Any) -> None:
        even = pc.equal(pc.bit_wise_and(batch.column("n"), 1), 0)
        mask: Any = {"arrow": even, "numpy": even.to_numpy(zero_copy_only=False) if not even.null_count else None,
                     "chunked": pa.chunked_array([even])}[self.kind]
        if mask is None:
            mask = pc.fill_null(even, False).to_numpy(zero_copy_only=False)
        ctx.forward(mask)
        if "fail" in batch.column_names and pc.any(pc.fill_null(batch.column("fail"), False)).as_py():
            raise ValueError("fail")


@pytest.mark.parametrize("kind", ["arrow", "numpy", "chunked"])
def test_forward_takes_a_mask_over_the_batch_and_its_halves(kind: str) -> None:
    """A mask selects rows of the batch in progress, also of the halves bisection hands the processor."""
    processor = ForwardMask()
    processor.kind = kind
    failures = Recorder()
    _, engine, sink, task = setup(processor, failures=failures)
    values = [{"n": i, **({"fail": True} if i == 5 else {})} for i in range(12)]
    values[8] = {"n": None}
    msgs = messages(values)
    msgs[11] = RawMessage("in", 0, 20, b"k", orjson.dumps(values[11]), 1011)  # an offset gap
    engine.process_messages(msgs, lambda t, p: task)
    assert [m.offset() for m, _, _ in failures.calls] == [5]
    assert [o.value["n"] for o in sink.outputs] == [0, 2, 4, 6, 10]
    assert [o.timestamp for o in sink.outputs] == [1000, 1002, 1004, 1006, 1010]


class ForwardWrong(BatchProcessor):
    """Forwards rows that are not the batch's: an offset past it, or a mask of the wrong length."""

    wrong = "offset"

    def process_batch(self, batch: Any, ctx: Any) -> None:
        if self.wrong == "offset":
            ctx.forward(pa.table({"offset": pc.add(batch.column("offset"), 100)}))
        else:
            ctx.forward(pa.array([True] * (batch.num_rows + 1)))


@pytest.mark.parametrize("wrong", ["offset", "mask"])
def test_forward_refuses_rows_that_are_not_the_batchs(wrong: str) -> None:
    processor = ForwardWrong()
    processor.wrong = wrong
    failures = Recorder()
    _, engine, sink, task = setup(processor, failures=failures)
    engine.process_messages(messages([{"n": 1}, {"n": 2}]), lambda t, p: task)
    assert [m.offset() for m, _, _ in failures.calls] == [0, 1] and not sink.outputs
    assert all("batch" in message for _, _, message in failures.calls)


def test_forward_of_keyless_records_and_tombstones_checks_sizes() -> None:
    """Forwarded records without a key or a value are produced as they are; one the producer would refuse fails
    its own record."""
    pipeline = parse_pipeline(DOC.format(cls="tests.apps.batch:Keep", serde="json", extra=""))
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 60_000, "log_level": 0})
    sink = KafkaSink(producer, pipeline, ("out",), hold=True, max_bytes=10_000)
    failures = Recorder()
    processor = Seen()
    processor.forward = True
    engine = engine_for(processor, "p", pipeline.processors["p"], pipeline, sink, failures)
    task = PartitionTask("in", 0, PartitionStore(MemoryKV()))
    big = orjson.dumps({"pad": "x" * 20_000})
    msgs = [RawMessage("in", 0, 0, None, b'{"a":1}', 1000), RawMessage("in", 0, 1, b"k", None, 1001),
            RawMessage("in", 0, 2, None, big, 1002), RawMessage("in", 0, 3, b"k", b'{"a":4}', 1003)]
    engine.process_messages(msgs, lambda t, p: task)
    assert [m.offset() for m, _, _ in failures.calls] == [2]
    assert [(item[1], item[2], item[6]) for item in sink.held] == [
        (b'{"a":1}', None, 1000), (None, b"k", 1001), (b'{"a":4}', b"k", 1003)]


@pytest.mark.parametrize("size", [1, 2, 63, 64, 500])
def test_bisection_dead_letters_the_failing_records_and_processes_the_rest_once(size: int) -> None:
    failures = Recorder()
    Poison.calls = 0
    _, engine, sink, task = setup(Poison(), failures=failures)
    poison = {size // 3, size - 1}
    values = [{"n": i, **({"fail": True} if i in poison else {})} for i in range(size)]
    engine.process_messages(messages(values), lambda t, p: task)
    assert sorted(m.offset() for m, _, _ in failures.calls) == sorted(poison)
    assert all(stage == "process" for _, stage, _ in failures.calls)
    assert sorted(o.value["n"] for o in sink.outputs) == sorted(set(range(size)) - poison)
    assert set(task.state.changes()) == {f"sn{i}".encode() for i in set(range(size)) - poison}  # failed: undone
    assert Poison.calls <= 1 + 2 * len(poison) * max(1, math.ceil(math.log2(size)))
    assert task.next_offset == size


def test_a_run_of_columns_is_processed_as_the_same_records_as_messages() -> None:
    """An archive's rows handed over as columns (`Run.of_columns`, no object per record): the same batches,
    outputs, dead letters (a message made for each, field for field) and state as from messages."""
    values: list[Any] = [{"n": i, **({"fail": True} if i in (3, 9) else {})} for i in range(12)]
    values[6] = b"{not json"
    msgs = [RawMessage("in", 0, 40 + i, b"k%d" % i, v if isinstance(v, bytes) else orjson.dumps(v), 1000 + i,
                       [("h", b"%d" % i)] if i % 4 == 0 else None) for i, v in enumerate(values)]
    seen = []
    for form in ("messages", "columns"):
        failures = Recorder()
        _, engine, sink, task = setup(Poison(), failures=failures)
        if form == "messages":
            engine.process_messages(msgs, lambda t, p, task=task: task)
        else:
            run = Run.of_columns("in", 0, [m.offset() for m in msgs], [m.key() for m in msgs],
                                 [m.value() for m in msgs], [m.timestamp()[1] for m in msgs],
                                 [m.headers() for m in msgs])
            engine.process_run(run, lambda t, p, task=task: task)
        letters = [(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp(), m.headers(), stage)
                   for m, stage, _ in failures.calls]
        seen.append((letters, [(o.key, o.value) for o in sink.outputs], dict(task.state.changes()),
                     task.next_offset))
    assert seen[0] == seen[1]
    assert [letter[2] for letter in seen[0][0]] == [43, 46, 49] and seen[0][3] == 52


class Pad(BatchProcessor):
    def process_batch(self, batch: Any, ctx: Any) -> None:
        ctx.emit_batch(pa.table({"pad": ["x" * n for n in batch.column("n").to_pylist()]}))


def test_an_output_the_producer_would_refuse_fails_its_own_record() -> None:
    """Checked inside the batch (message.max.bytes), so bisection finds the record whose output is too big;
    the others are produced once."""
    pipeline = parse_pipeline(DOC.format(cls="tests.apps.batch:Keep", serde="json", extra=""))
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 60_000, "log_level": 0})
    sink = KafkaSink(producer, pipeline, ("out",), hold=True, max_bytes=10_000)  # held: the outputs can be read
    failures = Recorder()
    engine = engine_for(Pad(), "p", pipeline.processors["p"], pipeline, sink, failures)
    task = PartitionTask("in", 0, PartitionStore(MemoryKV()))
    engine.process_messages(messages([{"n": 10}, {"n": 50_000}, {"n": 20}, {"n": 30}]), lambda t, p: task)
    assert [m.offset() for m, _, _ in failures.calls] == [1]
    assert [len(orjson.loads(item[1])["pad"]) for item in sink.held] == [10, 20, 30] and sink.emitted == 3


def test_a_failed_batch_sets_no_timers() -> None:
    _, engine, _, task = setup(TimerThenFail())
    engine.process_messages(messages([{"n": 0}, {"n": 1, "fail": True}, {"n": 2}, {"n": 3}]), lambda t, p: task)
    assert task.store is not None
    assert sorted(key for _, key in task.store.timers.pop_due(10_000)) == ["t0", "t2", "t3"]
    assert set(task.state.changes()) == {b"so0", b"so2", b"so3"}


class WindowCount(BatchProcessor):
    """Counts rows per second of `timestamp` in state, one timer per second; the timer emits the count with
    `emit_batch`."""

    def process_batch(self, batch: Any, ctx: Any) -> None:
        seconds = pc.divide(batch.column("timestamp"), 1000).to_pylist()
        counts: dict[str, int] = {}
        for second in seconds:
            counts[str(second)] = counts.get(str(second), 0) + 1
        before = ctx.state.get_many(list(counts))
        ctx.state.set_many({k: (b or 0) + n for (k, n), b in zip(counts.items(), before, strict=True)})
        for second in counts:
            ctx.set_timer(second, (int(second) + 1) * 1000)

    def on_timer(self, key: str, timestamp: int, ctx: Any) -> None:
        ctx.emit_batch(pa.table({"second": [int(key)], "count": [ctx.state[key]]}), key=pa.array([key]))
        del ctx.state[key]


def test_timers_fire_and_emit_batch_from_on_timer() -> None:
    _, engine, sink, task = setup(WindowCount())
    msgs = [RawMessage("in", 0, i, b"k", b"{}", 1000 + 300 * i) for i in range(8)]  # seconds 1, 1, 1, 1, 2, ... 3
    engine.process_messages(msgs, lambda t, p: task)
    assert engine.fire_timers([task], 3_000) == 2
    assert [(o.key, o.value, o.timestamp) for o in sink.outputs] == [
        ("1", {"second": 1, "count": 4}, 2000), ("2", {"second": 2, "count": 3}, 3000)]
    assert dict(task.state.items()) == {"3": 1}


def test_records_that_do_not_decode_are_dead_lettered_in_order() -> None:
    failures = Recorder()
    processor = Seen()
    _, engine, _, task = setup(processor, failures=failures)
    msgs = messages([b'{"n":0}', b'{"n":1}', b"not json", b'{"n":3}', None], raw=True)
    engine.process_messages(msgs, lambda t, p: task)
    assert [(m.offset(), stage) for m, stage, _ in failures.calls] == [(2, "decode")]
    assert [b.column("offset").to_pylist() for b in processor.batches] == [[0, 1], [3, 4]]
    assert processor.batches[1].column("n").to_pylist() == [3, None]  # a tombstone is a row of nulls


def test_control_records_move_the_clock_and_never_reach_the_processor() -> None:
    processor = Seen()
    _, engine, _, task = setup(processor)
    mark = orjson.dumps({"proc": "up", "inst": "0", "parts": ["x:0"], "wm": 77})
    msgs = [*messages([{"n": 0}]), RawMessage("in", 0, 1, None, mark, 0, list(CONTROL_HEADERS)),
            *messages([{"n": 2}], start=2)]
    assert engine.process_messages(msgs, lambda t, p: task) == 2
    assert processor.batches[0].column("offset").to_pylist() == [0, 2]
    assert engine.control_records == 1 and clock_of(task).reports == {"up": {"x:0": 77}}


def test_a_run_of_control_records_only_moves_the_clock_and_the_offset() -> None:
    processor = Seen()
    _, engine, _, task = setup(processor)
    marks = [orjson.dumps({"proc": "up", "inst": "0", "parts": ["x:0"], "wm": wm}) for wm in (77, 99)]
    msgs = [RawMessage("in", 0, i, None, mark, 0, list(CONTROL_HEADERS)) for i, mark in enumerate(marks)]
    assert engine.process_messages(msgs, lambda t, p: task) == 0
    assert processor.batches == [] and task.next_offset == 2
    assert clock_of(task).reports == {"up": {"x:0": 99}}


def test_late_rows_are_handled_by_the_late_policy_and_left_out_of_the_batch() -> None:
    processor = Seen()
    _, engine, _, task = setup(processor, extra="    event_time: {field: ts}")
    clock_of(task).floor = 5_000  # the partition's saved watermark (a fresh one would take it back to none)
    values = [{"ts": 6_000}, {"ts": 1_000}, {"ts": 7_000}, {"ts": "1970-01-01T00:00:08Z"}]
    assert engine.process_messages(messages(values), lambda t, p: task) == 4
    assert processor.batches[0].column("offset").to_pylist() == [0, 2, 3]
    assert engine.late.counters.dropped == 1
    assert task.max_event_time == 8_000


def test_event_time_and_its_lateness_sketch_are_the_per_record_engines() -> None:
    """Disordered event times with `confidence` < 1 (a lateness sketch): after the same records, the batch engine's
    partition has the per-record engine's largest event time and sketch counts."""
    rng = random.Random(8)
    values = [{"ts": 10_000 + 10 * i - rng.choice([0, 0, 0, 5, 300, 4_000])} for i in range(3_000)]
    extra = "    event_time: {field: ts, confidence: 0.9}"
    _, batch_engine, _, batch_task = setup(Seen(), extra=extra)
    pipeline = parse_pipeline(DOC.format(cls="tests.apps.batch:KeepPerRecord", serde="json", extra=extra))
    engine = Engine(RunningTotalsPerRecord(), "p", pipeline.processors["p"], pipeline, CollectingSink(["out"]),
                    Recorder())
    task = PartitionTask("in", 0, PartitionStore(MemoryKV()))
    for start in range(0, 3_000, 700):
        msgs = messages(values[start:start + 700], start=start)
        engine.process_messages(msgs, lambda t, p: task)
        batch_engine.process_messages(msgs, lambda t, p: batch_task)
    assert batch_task.max_event_time == task.max_event_time
    assert clock_of(batch_task).sketch.counts == clock_of(task).sketch.counts  # type: ignore[union-attr]
    assert clock_of(task).sketch.total == 3_000  # type: ignore[union-attr]


def test_the_lateness_sketch_counts_a_batch_as_records_one_by_one() -> None:
    rng = random.Random(5)
    lateness = [rng.choice([0, 0, 3, 40, 10**6]) for _ in range(2_500)]
    one, many = LatenessSketch(max_total=1_000), LatenessSketch(max_total=1_000)
    for value in lateness:
        one.add(value)
    many.add_many(lateness[:1_234])
    many.add_many(lateness[1_234:])
    assert (many.counts, many.total) == (one.counts, one.total)


def test_bulk_state_reads_and_writes(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "db")
    kv.write({b"sa": b"1", b"sb": b"[2]"})
    state = StateMap(kv)
    state["c"] = 3
    del state["b"]
    assert state.get_many(["a", "b", "c", "d", "a"], default=0) == [1, 0, 3, 0, 1]
    undo = state.journal()
    undo.clear()
    state["c"] = 4
    state.set_many({"c": 30, "a": 10, "e": 5})
    state["e"] = 6
    assert state.get_many(["a", "e", "c"]) == [10, 6, 30]
    state.rollback()  # set_many is journaled like single writes, in order with them
    assert state.get_many(["a", "e", "c"]) == [1, None, 3]
    state.set_many({"a": 11})
    undo.clear()  # a record that succeeded: its writes stay
    state.rollback()
    assert state.get_many(["a", "c"]) == [11, 3]
    with pytest.raises(TypeError):
        state.set_many({1: 2})  # type: ignore[dict-item]
    kv.close()


def test_engine_for_picks_the_engine_and_refuses_what_batches_cannot_do() -> None:
    pipeline = parse_pipeline(DOC.format(cls="tests.apps.batch:Keep", serde="json", extra=""))
    spec = pipeline.processors["p"]
    assert type(engine_for(RunningTotalsPerRecord(), "p", spec, pipeline, CollectingSink(["out"]), Recorder())) \
        is Engine
    stop = spec.model_copy(update={"on_error": "stop", "dedup": parse_pipeline(DOC.format(
        cls="x:Y", serde="json", extra="    dedup: {window: 1m}")).processors["p"].dedup})
    with pytest.raises(ValueError, match="dedup"):
        engine_for(Seen(), "p", stop, pipeline, CollectingSink(["out"]), Recorder())
    with pytest.raises(TypeError, match="BatchProcessor"):
        Seen().process(None, None)  # type: ignore[arg-type]


def test_batch_windows_equal_per_record_windows_in_the_driver() -> None:
    """Same input, same watermarks: the batch windows and `WindowedProcessor` emit the same results (hopping
    windows, a mean), and keep the same state."""
    config = {"window": {"type": "hopping", "size": "10s", "slide": "5s"},
              "aggregate": {"type": "mean", "field": "v"}, "key": "g"}
    doc = {"pipeline": "w", "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
           "processors": {name: {"class": cls, "inputs": ["in"], "outputs": ["out"], "config": config,
                                 "semantics": {"state": "exactly_once", "output": "at_least_once"},
                                 "event_time": {"field": "ts"}}
                          for name, cls in [("w", "stylus.windows.batch:BatchWindowedProcessor")]}}
    rng = random.Random(9)
    rows = [{"g": f"g{rng.randrange(4)}", "v": rng.randrange(10), "ts": 1_000 * i + rng.randrange(3_000)}
            for i in range(200)]
    results = []
    for cls in ("stylus.windows.batch:BatchWindowedProcessor", "stylus.windows:WindowedProcessor"):
        doc["processors"]["w"]["class"] = cls  # type: ignore[index]
        with TestDriver(parse_pipeline(orjson.dumps(doc).decode())) as driver:
            for i, row in enumerate(rows):
                driver.send("in", row, key=row["g"], timestamp=row["ts"])
                if i % 50 == 49:
                    driver.advance_watermark(row["ts"] - 5_000)
            driver.advance_watermark(10**9)
            results.append(([o.value for o in driver.outputs("out")], [driver.state("w", p) for p in range(2)]))
    assert results[0][0] and sorted(map(orjson.dumps, results[0][0])) == sorted(map(orjson.dumps, results[1][0]))
    assert results[0][1] == results[1][1]


FLOAT_VALUES = {  # mixed magnitudes and signs: sums that round differently when added in another order
    "floats": lambda rng: rng.choice([rng.random(), rng.random() * 1e9, -rng.random() * 1e-7, 0.1, 1e16, -1e16]),
    "floats and nulls": lambda rng: None if rng.random() < 0.3 else rng.choice([0.1, rng.random() * 1e12, -1e16]),
}


@pytest.mark.parametrize("window", [{"type": "tumbling", "size": "10s"},
                                    {"type": "hopping", "size": "10s", "slide": "5s"}], ids=["tumbling", "hopping"])
@pytest.mark.parametrize("aggregate", ["sum", "mean"])
@pytest.mark.parametrize("kind", FLOAT_VALUES)
def test_batch_float_windows_equal_per_record_windows_to_the_last_bit(window: dict[str, str], aggregate: str,
                                                                       kind: str) -> None:
    """Float sums and means fed in large batches (cut differently each time), a few groups with many rows per
    window each: the results and the state are the per-record fold's, bit for bit."""
    config = {"window": window, "aggregate": {"type": aggregate, "field": "v"}, "key": "g"}
    doc = {"pipeline": "w", "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
           "processors": {"w": {"class": "", "inputs": ["in"], "outputs": ["out"], "config": config,
                                "semantics": {"state": "exactly_once", "output": "at_least_once"},
                                "event_time": {"field": "ts"}}}}
    rng = random.Random(f"{kind} {aggregate}")
    rows = [{"g": f"g{rng.randrange(3)}", "v": FLOAT_VALUES[kind](rng), "ts": 100 * i + rng.randrange(2_000)}
            for i in range(1_500)]
    results = []
    for cls, cuts in (("stylus.windows:WindowedProcessor", [1_500]),
                      ("stylus.windows.batch:BatchWindowedProcessor", [1_500]),
                      ("stylus.windows.batch:BatchWindowedProcessor", [7, 493, 300, 700])):
        doc["processors"]["w"]["class"] = cls  # type: ignore[index]
        with TestDriver(parse_pipeline(orjson.dumps(doc).decode())) as driver:
            start = 0
            for size in cuts:
                chunk = rows[start:start + size]
                start += size
                driver.send_many("in", chunk, keys=[row["g"] for row in chunk])
            driver.advance_watermark(10**9)
            results.append((sorted(orjson.dumps(o.value) for o in driver.outputs("out")), driver.state("w", 0)))
    assert len(results[0][0]) > 10
    assert results[1] == results[0] and results[2] == results[0]
