"""The Kafka sink against the real broker: header strings librdkafka cannot take never reach it
(confluent-kafka crashes the whole process on a lone surrogate in a header name)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from stylus import Context, Processor, Record
from stylus.config import parse_pipeline
from stylus.core import Engine, PartitionTask, RawMessage
from stylus.runtime.sink import KafkaSink, clean_headers
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.support.kafka import read_raw

BAD = "bad\udcff"  # a lone surrogate: not encodable as UTF-8


def test_clean_headers_refuses_or_repairs() -> None:
    assert clean_headers({"a": b"1", "b": "x"}, repair=False) == [("a", b"1"), ("b", "x")]
    with pytest.raises(ValueError, match="not valid UTF-8"):
        clean_headers([(BAD, b"v")], repair=False)
    assert clean_headers([(BAD, BAD)], repair=True) == [("bad\\udcff", "bad\\udcff")]


def test_emitted_bad_header_fails_the_record_and_dead_letters_are_repaired(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("sink")
    pipeline = parse_pipeline(f"pipeline: s\ntopics: {{src: {{}}, {topic}: {{}}}}\nprocessors:\n"
                              f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}]}}\n")
    producer = Producer({"bootstrap.servers": bootstrap})
    sink = KafkaSink(producer, pipeline, (topic,), hold=False)
    with pytest.raises(ValueError):  # inside `process` this is an ordinary record failure (on_error)
        sink(topic, "k", {"v": 1}, 1000, {BAD: b"x"})
    sink.send(topic, b"raw", b"k", 1000, [(BAD, b"x"), ("ok", None)])  # the dead-letter path
    sink.flush(10)
    [msg] = read_raw(bootstrap, topic)
    assert msg.value() == b"raw" and msg.headers() == [("bad\\udcff", b"x"), ("ok", None)]


class EmitThenFail(Processor):
    """Counts per key and emits twice per record (the engine's direct path and its general case), then
    fails the records marked `fail`; a record marked `unencodable` emits a value JSON cannot take."""

    def process(self, record: Record, ctx: Context) -> None:
        ctx.state[record.key] = (ctx.state.get(record.key) or 0) + 1
        ctx.emit({"n": record.value["n"]}, key=record.key)
        if record.value.get("unencodable"):
            ctx.emit({"o": object()})
        ctx.emit({"n": record.value["n"], "again": True}, key="other", timestamp=5, headers={"h": b"1"})
        if record.value.get("fail"):
            raise ValueError("bad record")


def test_direct_output_is_atomic_ordered_and_counted(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """The engine's hot path past `KafkaSink.__call__` (encode in emit, produce positionally once the
    record succeeded) leaves exactly what the sink itself would, and nothing of a failing record."""
    topic = topic_factory("direct")
    pipeline = parse_pipeline(f"pipeline: s\ntopics: {{src: {{}}, {topic}: {{}}}}\nprocessors:\n"
                              f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}], "
                              f"semantics: {{state: exactly_once, output: at_least_once}}}}\n")
    sink = KafkaSink(Producer({"bootstrap.servers": bootstrap}), pipeline, (topic,), hold=False)
    failed: list[int] = []
    engine = Engine(EmitThenFail(), "p", pipeline.processors["p"], pipeline, sink,
                    lambda msg, exc, stage, task: failed.append(msg.offset()))
    task = PartitionTask("src", 0, PartitionStore(MemoryKV()))
    values: list[dict[str, Any]] = [{"n": 0}, {"n": 1, "fail": True}, {"n": 2}, {"n": 3, "unencodable": True},
                                    {"n": 4}]
    msgs = [RawMessage("src", 0, i, b"k", orjson.dumps(v), 1000 + i) for i, v in enumerate(values)]
    assert engine.process_messages(msgs, lambda t, p: task) == 5
    assert failed == [1, 3] and sink.emitted == 6
    assert task.state is not None and task.state["k"] == 3  # the failing records' writes were undone
    sink.paused = True  # a checkpoint in flight: the engine holds the items in the sink's list
    held = [RawMessage("src", 0, 5, b"k", orjson.dumps({"n": 5}), 1005),
            RawMessage("src", 0, 6, b"k", orjson.dumps({"n": 6, "fail": True}), 1006)]
    engine.process_messages(held, lambda t, p: task)
    sink.send(topic, b"dead letter", b"d", 7, [("why", b"x")])  # the sink's own path, held in the same order
    engine.process_messages([RawMessage("src", 0, 7, b"k", orjson.dumps({"n": 7}), 1007)], lambda t, p: task)
    assert failed == [1, 3, 6] and sink.held_count == 5 and sink.emitted == 11
    sink.producer.flush(10)
    assert len(read_raw(bootstrap, topic)) == 6  # nothing held was produced
    sink.resume()
    sink.flush(10)
    out = [(m.key(), orjson.loads(m.value()) if m.key() != b"d" else m.value(), m.timestamp()[1], m.headers())
           for m in read_raw(bootstrap, topic)]
    expected: list[tuple[Any, ...]] = []
    for n in (0, 2, 4, 5, 7):
        expected += [(b"k", {"n": n}, 1000 + n, None), (b"other", {"n": n, "again": True}, 5, [("h", b"1")])]
    expected.insert(8, (b"d", b"dead letter", 7, [("why", b"x")]))
    assert out == expected


def test_at_most_once_output_is_held_by_the_engine_until_released(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """A holding sink (at-most-once output) is still the engine's direct path: the record's encoded outputs
    wait in `held` (one list extend per record), reach Kafka only on release, and a failing record's never."""
    topic = topic_factory("held")
    pipeline = parse_pipeline(f"pipeline: s\ntopics: {{src: {{}}, {topic}: {{}}}}\nprocessors:\n"
                              f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}], "
                              f"semantics: {{state: exactly_once, output: at_most_once}}}}\n")
    sink = KafkaSink(Producer({"bootstrap.servers": bootstrap}), pipeline, (topic,), hold=True)
    assert sink.direct() is not None and sink.direct().hold is sink.held  # type: ignore[union-attr]
    failed: list[int] = []
    engine = Engine(EmitThenFail(), "p", pipeline.processors["p"], pipeline, sink,
                    lambda msg, exc, stage, task: failed.append(msg.offset()))
    task = PartitionTask("src", 0, PartitionStore(MemoryKV()))
    msgs = [RawMessage("src", 0, i, b"k", orjson.dumps({"n": i, "fail": i == 1}), 1000 + i) for i in range(3)]
    engine.process_messages(msgs, lambda t, p: task)
    assert failed == [1] and sink.held_count == 4 and sink.emitted == 4
    sink.producer.flush(10)
    assert read_raw(bootstrap, topic) == []
    sink.release()
    sink.flush(10)
    assert [(m.key(), orjson.loads(m.value())["n"]) for m in read_raw(bootstrap, topic)] == [
        (b"k", 0), (b"other", 0), (b"k", 2), (b"other", 2)]


def test_exactly_once_output_held_during_a_commit_keeps_its_ids(bootstrap: str) -> None:
    """While a transaction's commit is in flight, the engine holds exactly-once outputs stamped (record ids
    asked for) exactly as it would produce them (`stylus.id` = prefix + offset + emit index), nothing of a
    failing record, and the sink's own stamping (a dead letter) continues the same record's numbering."""
    from stylus.runtime.transactions import ID_HEADER, TransactionalSink

    pipeline = parse_pipeline("pipeline: s\ntopics: {src: {}, out: {}}\nprocessors:\n"
                              "  p: {class: 'a.b:C', inputs: [src], outputs: [out], "
                              "semantics: {state: exactly_once, output: exactly_once}}\n")
    failed: list[int] = []
    engine = Engine(EmitThenFail(), "p", pipeline.processors["p"], pipeline, KafkaSink(
        Producer({"bootstrap.servers": bootstrap}), pipeline, ("out",), hold=False),
        lambda msg, exc, stage, task: failed.append(msg.offset()))
    sink = TransactionalSink(Producer({"bootstrap.servers": bootstrap}), pipeline, ("out",), engine.ctx, "src:0:",
                             stamp=True)
    sink.paused = True
    task = PartitionTask("src", 0, PartitionStore(MemoryKV()))
    task.sink = sink  # the partition's transactional sink, as the worker sets it
    msgs = [RawMessage("src", 0, i, b"k", orjson.dumps({"n": i, "fail": i == 11}), 1000 + i) for i in (10, 11, 12)]
    engine.process_messages(msgs, lambda t, p: task)
    sink.send("out", b"late", b"k", 1012)  # the sink's own path after record 12's two outputs
    assert failed == [11] and sink.held[-1][1] == b"late"
    assert [dict(item[7])[ID_HEADER] for item in sink.held] == [
        b"src:0:10:0", b"src:0:10:1", b"src:0:12:0", b"src:0:12:1", b"src:0:12:2"]
    assert [item[6] for item in sink.held] == [1010, 5, 1012, 5, 1012]


def test_a_batch_gives_each_partitions_outputs_to_its_own_transaction(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """Exactly-once outputs belong to the transaction of their input partition: within one batch that
    moves between partitions, each partition's outputs reach its own sink (here partition 0's produces,
    partition 1's is paused and holds), stamped with its own prefix and emit indexes."""
    from stylus.runtime.transactions import ID_HEADER, TransactionalSink

    topic = topic_factory("per-partition")
    pipeline = parse_pipeline(f"pipeline: s\ntopics: {{src: {{partitions: 2}}, {topic}: {{}}}}\nprocessors:\n"
                              f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}], "
                              f"semantics: {{state: exactly_once, output: exactly_once}}}}\n")
    failed: list[int] = []
    engine = Engine(EmitThenFail(), "p", pipeline.processors["p"], pipeline, KafkaSink(
        Producer({"bootstrap.servers": bootstrap}), pipeline, (topic,), hold=False),
        lambda msg, exc, stage, task: failed.append(msg.offset()))
    tasks = {}
    for partition in (0, 1):
        sink = TransactionalSink(Producer({"bootstrap.servers": bootstrap}), pipeline, (topic,), engine.ctx,
                                 f"src:{partition}:", stamp=True)
        sink.paused = partition == 1
        tasks[partition] = PartitionTask("src", partition, PartitionStore(MemoryKV()))
        tasks[partition].sink = sink
    order = [(0, 10), (0, 11), (1, 20), (1, 21), (0, 12)]
    msgs = [RawMessage("src", p, o, b"k", orjson.dumps({"n": o, "fail": o == 11}), 1000 + o) for p, o in order]
    engine.process_messages(msgs, lambda t, p: tasks[p])
    assert failed == [11]
    produced, held = tasks[0].sink, tasks[1].sink
    assert produced is not None and held is not None
    produced.producer.flush(10)  # type: ignore[attr-defined]
    ids = [dict(m.headers() or [])[ID_HEADER] for m in read_raw(bootstrap, topic)]
    assert ids == [b"src:0:10:0", b"src:0:10:1", b"src:0:12:0", b"src:0:12:1"]
    assert [dict(item[7])[ID_HEADER] for item in held.held] == [  # type: ignore[attr-defined]
        b"src:1:20:0", b"src:1:20:1", b"src:1:21:0", b"src:1:21:1"]


def test_held_output_the_producer_would_refuse_fails_as_it_is_held(bootstrap: str) -> None:
    """Held output is produced at the checkpoint, outside its record: one over the producer's
    message.max.bytes must fail as it is held (its record then fails alone), never at the release. The
    check counts value, key, headers and librdkafka's framing, and is never more lenient than librdkafka."""
    from confluent_kafka import KafkaException

    from stylus.core.sink import FRAMING_BYTES, refuse_oversized
    from stylus.runtime.transactions import TransactionalSink

    pipeline = parse_pipeline("pipeline: s\ntopics: {src: {}, out: {}}\nprocessors:\n"
                              "  p: {class: 'a.b:C', inputs: [src], outputs: [out]}\n")
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000})
    sink = KafkaSink(producer, pipeline, ("out",), hold=True, max_bytes=10_000)
    sink("out", "k", "x" * 9_000, 1, None)
    with pytest.raises(ValueError, match="too large for the producer"):
        sink("out", "k", "x" * 10_000, 1, None)
    assert sink.held_count == 1
    txn = TransactionalSink(producer, pipeline, ("out",), Engine(EmitThenFail(), "p", pipeline.processors["p"],
                            pipeline, sink, lambda *a: None).ctx, "src:0:", max_bytes=10_000)
    txn.paused = True
    with pytest.raises(ValueError, match="too large"):
        txn.send("out", b"x" * 9_900, b"k", 1)  # fits alone, not with its stylus.id header and framing
    # whatever the check lets through, librdkafka takes: at the limit, and with headers
    for value_size, headers in ((10_000 - FRAMING_BYTES - 1, None), (9_000, [("h", b"y" * 800)])):
        item = ("out", b"x" * value_size, b"k", -1, None, None, 1, headers)
        refuse_oversized([item], 10_000)
        try:
            producer.produce(*item)
        except KafkaException as exc:  # pragma: no cover - the failure this test exists for
            pytest.fail(f"librdkafka refused what the check let through: {exc}")
    producer.purge()


@pytest.mark.parametrize("poller", [True, False], ids=["worker-polls", "no-poller"])
def test_await_delivery_leaves_the_reports_to_the_poller(
        bootstrap: str, topic_factory: Callable[..., str], poller: bool) -> None:
    """An overlapped checkpoint's wait for its output (KafkaSink.await_delivery) serves no delivery report
    while the worker polls: confluent-kafka takes the GIL per report, and a second thread doing that fought
    the busy worker for it on every record. It returns only once the reports are served (a failure among
    them must fail the checkpoint), and without a poller it serves them itself after its grace."""
    topic = topic_factory("await")
    pipeline = parse_pipeline(f"pipeline: s\ntopics: {{src: {{}}, {topic}: {{}}}}\nprocessors:\n"
                              f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}]}}\n")
    served_on: list[int] = []  # every success is reported here, so the serving thread shows
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "on_delivery": lambda err, msg: served_on.append(threading.get_ident())})
    producer.flush(10)  # connected
    sink = KafkaSink(producer, pipeline, (topic,), hold=False)
    for n in range(100):
        sink(topic, "k", {"n": n}, 1000, None)
    waiter = threading.Thread(target=sink.await_delivery, kwargs={"timeout": 20, "grace": 5 if poller else 0.3})
    waiter.start()
    if poller:
        time.sleep(0.5)  # long enough for the broker to acknowledge: still waiting, for the reports
        assert waiter.is_alive() and not served_on
        while waiter.is_alive():
            producer.poll(0.01)
        assert served_on == [threading.get_ident()] * 100
    else:
        waiter.join(10)
        assert not waiter.is_alive() and served_on == [waiter.ident] * 100
    assert len(producer) == 0 and len(read_raw(bootstrap, topic)) == 100
