"""on_error policies on the real broker: dead_letter, skip, stop; and `stylus dlq` listing / re-injection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from stylus.config.model import Pipeline, TopicSpec
from stylus.core.message import RawMessage
from stylus.core.task import PartitionTask
from stylus.kafka.admin import create_topics
from stylus.runtime.failures import FailurePolicy
from stylus.runtime.runner import PipelineRunner
from stylus.runtime.sink import KafkaSink
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.conftest import PipelineFactory, unique
from tests.support.cli import run_stylus
from tests.support.kafka import fenced_producer_errors, read_raw

N = 400  # 1% fail in `process`, 1% garbage that does not decode
GARBAGE = [b"\xff\xfe not json", b"{truncated", b"", b"\x00\x01\x02", b"[1, 2"]


def _records() -> list[tuple[bytes, bytes, bool]]:
    """(key, raw value, good?) in production order."""
    out = []
    for i in range(N):
        key = f"k{i % 7}".encode()
        if i % 100 == 7:
            out.append((key, orjson.dumps({"id": i, "fail": True}), False))
        elif i % 100 == 13:
            out.append((key, GARBAGE[(i // 100) % len(GARBAGE)] + b"#" + str(i).encode(), False))
        else:
            out.append((key, orjson.dumps({"id": i}), True))
    return out


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, bool]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "partitioner": "murmur2_random"})
    for i, (key, value, _) in enumerate(records):
        producer.produce(topic, value, key, timestamp=1_700_000_000_000 + i,
                         headers=[("trace-id", f"t{i}".encode())])
    assert producer.flush(30) == 0


def _doc(policy: str, semantics: dict[str, str], cls: str = "tests.apps.counting:Failing") -> dict[str, Any]:
    return {
        "pipeline": "bad",
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
        "processors": {
            "p": {"class": cls, "inputs": ["in"], "outputs": ["out"], "on_error": policy,
                  "semantics": semantics, "checkpoint": {"interval": "500ms"}},
        },
    }


def _run(pipeline: Pipeline, bootstrap: str) -> PipelineRunner:
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=0.5)
    runner.run(install_signals=False)
    return runner


def _in(pipeline: Pipeline) -> str:
    return pipeline.processors["p"].inputs[0]


def _out(pipeline: Pipeline) -> str:
    return pipeline.processors["p"].outputs[0]


def _ids(bootstrap: str, topic: str) -> list[int]:
    return sorted(json.loads(m.value())["id"] for m in read_raw(bootstrap, topic))


SEMANTICS = {
    "at_least_once": {"output": "at_least_once"},
    "exactly_once": {"output": "exactly_once"},
    "stateful_at_most_once": {"state": "exactly_once", "output": "at_most_once"},
}


@pytest.mark.parametrize("semantics", sorted(SEMANTICS))
def test_dead_letter_keeps_every_good_record_and_letters_every_bad_one_unchanged(
    bootstrap: str, pipeline_factory: PipelineFactory, semantics: str
) -> None:
    _, pipeline = pipeline_factory(_doc("dead_letter", SEMANTICS[semantics]))
    records = _records()
    _produce(bootstrap, _in(pipeline), records)
    runner = _run(pipeline, bootstrap)
    assert runner.errors == {}

    assert _ids(bootstrap, _out(pipeline)) == [i for i, r in enumerate(records) if r[2]]  # each once
    letters = read_raw(bootstrap, pipeline.dlq_topic("p"))
    bad = {(k, v) for k, v, good in records if not good}
    assert len(letters) == len(bad) == 8
    assert {(m.key(), m.value()) for m in letters} == bad  # key and value unchanged
    for m in letters:
        headers = dict(m.headers())
        offset = int(headers["stylus.source.offset"])
        source_partition = int(headers["stylus.source.partition"])
        assert headers["stylus.source.topic"].decode() == _in(pipeline)
        stage = headers["stylus.error.stage"].decode()
        if m.value().startswith(b'{"id"'):
            assert stage == "process"
            assert headers["stylus.error"].startswith(b"ValueError: bad record")
            assert b"counting.py" in headers["stylus.error.trace"]
        else:
            assert stage == "decode" and headers["stylus.error"].startswith(b"JSONDecodeError")
        assert int(headers["stylus.error.time"]) > 1_700_000_000_000
        assert headers["stylus.processor"] == b"p"
        assert headers["trace-id"].startswith(b"t")  # the record's own headers stay
        assert m.timestamp()[1] >= 1_700_000_000_000
        # the source coordinates point at the very record
        src = read_raw_at(bootstrap, _in(pipeline), source_partition, offset)
        assert (src.key(), src.value()) == (m.key(), m.value())
    assert runner.workers["p"].failures.dead_lettered == 8


def read_raw_at(bootstrap: str, topic: str, partition: int, offset: int) -> Any:
    from stylus.kafka.reader import read_range

    [msg] = list(read_range(bootstrap, {(topic, partition): (offset, offset + 1)}))
    return msg


def test_skip_counts_and_drops_bad_records(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    _, pipeline = pipeline_factory(_doc("skip", SEMANTICS["at_least_once"]))
    records = _records()
    _produce(bootstrap, _in(pipeline), records)
    runner = _run(pipeline, bootstrap)
    assert runner.errors == {}
    assert _ids(bootstrap, _out(pipeline)) == [i for i, r in enumerate(records) if r[2]]
    assert runner.workers["p"].failures.skipped == 8
    assert read_raw(bootstrap, pipeline.dlq_topic("p")) == []


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def test_stop_checkpoints_right_before_the_failing_record_and_exits_non_zero(
    bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path
) -> None:
    doc = _doc("stop", {"state": "exactly_once", "output": "at_least_once"}, "tests.apps.faulty:CountThenFail")
    doc["topics"]["in"]["partitions"] = 1
    path, pipeline = pipeline_factory(doc)
    values = [{"id": i, "fail": i == 37} for i in range(60)]
    _produce(bootstrap, _in(pipeline), [(b"k", orjson.dumps(v), True) for v in values])

    result = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=90)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "bad record 37" in result.stderr and "process failed at" in result.stderr
    assert "FAILED" in result.stdout

    store_dir = tmp_path / "state" / pipeline.pipeline / "p" / f"{_in(pipeline)}-0"
    store = PartitionStore(RocksKV(store_dir))
    try:
        assert store.stored_offset() == 37  # the next run starts with the failing record
        assert store.state["k"] == 37 and store.state["__total__"] == 37  # nothing of record 37 saved
    finally:
        store.close()
    assert _committed(bootstrap, pipeline.group_id("p"), _in(pipeline), 1) == {0: 37}
    assert _ids(bootstrap, _out(pipeline)) == list(range(37))


def test_dlq_command_lists_and_reinjects_after_a_fix(
    bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path
) -> None:
    path, pipeline = pipeline_factory(_doc("dead_letter", SEMANTICS["at_least_once"]))
    records = [(r[0], r[1], r[2]) for r in _records() if r[2] or r[1].startswith(b'{"id"')]  # no garbage
    _produce(bootstrap, _in(pipeline), records)
    assert _run(pipeline, bootstrap).errors == {}

    listed = run_stylus("dlq", str(path), "--processor", "p", "--json", bootstrap=bootstrap)
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["topic"] == pipeline.dlq_topic("p") and doc["count"] == 4
    failed_ids = sorted(json.loads(x["value"])["id"] for x in doc["letters"])
    assert failed_ids == [7, 107, 207, 307]
    first = doc["letters"][0]
    assert first["stage"] == "process" and first["error"].startswith("ValueError: bad record")
    assert first["source"]["topic"] == _in(pipeline) and first["reinjected"] is False

    text = run_stylus("dlq", str(path), "--processor", "p", bootstrap=bootstrap)
    assert "4 dead letters" in text.stdout and "ValueError: bad record 7" in text.stdout

    # the fix: the same pipeline with a processor that no longer fails
    fixed = path.read_text().replace("tests.apps.counting:Failing", "tests.apps.counting:Passthrough")
    path.write_text(fixed)
    again = run_stylus("dlq", str(path), "--processor", "p", "--reinject", bootstrap=bootstrap)
    assert again.returncode == 0, again.stderr
    assert "re-injected 4 records" in again.stdout
    twice = run_stylus("dlq", str(path), "--processor", "p", "--reinject", "--json", bootstrap=bootstrap)
    twice_doc = json.loads(twice.stdout)
    assert twice_doc["reinjected"] == 0 and twice_doc["already_reinjected"] == 4
    assert all(x["reinjected"] for x in twice_doc["letters"])

    from stylus.config import load_pipeline

    reinjected = [m for m in read_raw(bootstrap, _in(pipeline)) if b'"fail":true' in m.value()]
    assert len(reinjected) == 8  # the originals plus one copy each, no more
    for m in reinjected:  # the copies carry the record's own headers, none of the error headers
        names = [k for k, _ in m.headers() or []]
        assert "trace-id" in names and not any(k.startswith("stylus.") for k in names)
    assert _run(load_pipeline(path), bootstrap).errors == {}
    out = _ids(bootstrap, _out(pipeline))
    assert out == [i for i in range(N) if i % 100 != 13]  # now every record made it, each once
    assert len(read_raw(bootstrap, pipeline.dlq_topic("p"))) == 4  # nothing new failed


@pytest.mark.parametrize("semantics", sorted(SEMANTICS))
def test_an_output_too_large_to_produce_fails_its_record_not_the_processor(
        bootstrap: str, pipeline_factory: PipelineFactory, semantics: str) -> None:
    """librdkafka refuses a record over `message.max.bytes` when it is produced (MSG_SIZE_TOO_LARGE): bad
    input that makes such an output is dead-lettered like any failing record, whatever the output semantics
    (at-most-once and overlapped checkpoints produce held output later, outside the record)."""
    doc = _doc("dead_letter", SEMANTICS[semantics], cls="tests.apps.counting:Padded")
    doc["kafka"] = {"producer": {"message.max.bytes": 20_000}}
    _, pipeline = pipeline_factory(doc)
    records = [(f"k{i % 3}".encode(), orjson.dumps({"id": i, "pad": 30_000 if i in (5, 17) else 10}), i not in (5, 17))
               for i in range(40)]
    _produce(bootstrap, _in(pipeline), records)
    runner = _run(pipeline, bootstrap)
    assert runner.errors == {}
    assert _ids(bootstrap, _out(pipeline)) == [i for i in range(40) if i not in (5, 17)]
    letters = read_raw(bootstrap, pipeline.dlq_topic("p"))
    assert sorted(orjson.loads(m.value())["id"] for m in letters) == [5, 17]
    for m in letters:
        assert b"too large" in dict(m.headers())["stylus.error"].lower()


@pytest.fixture(scope="module")
def fenced_errors(bootstrap: str) -> tuple[str, tuple[KafkaException, KafkaException]]:
    """A topic, and the errors a producer fenced while writing to it raises (served by poll, raised by produce)."""
    topic = unique("fatal")
    create_topics(bootstrap, {topic: TopicSpec(partitions=1)})
    return topic, fenced_producer_errors(bootstrap, topic)


@pytest.mark.parametrize("policy", ["dead_letter", "skip", "stop"])
def test_a_producers_fatal_error_is_not_a_records_failure(
        bootstrap: str, fenced_errors: tuple[str, tuple[KafkaException, KafkaException]], policy: str) -> None:
    """A record whose output met a fenced producer did not fail: whatever `on_error` says, the error goes on
    to the worker (Worker._drop_if_fenced), and nothing is dead-lettered or counted as skipped."""
    topic, errors = fenced_errors
    producer = Producer({"bootstrap.servers": bootstrap})
    sink = KafkaSink(producer, None, (), hold=False)  # type: ignore[arg-type]  # no outputs: only send()
    failures = FailurePolicy(policy, "p", topic, sink)
    msg = RawMessage(topic, 0, 7, b"k", b"{}", 0)
    for error in errors:
        with pytest.raises(KafkaException) as raised:
            failures(msg, error, "process", PartitionTask(topic, 0, None))
        assert raised.value is error
    assert failures.dead_lettered == failures.skipped == 0 and sink.emitted == 0
