"""The state changelog on a real broker: what committed transactions wrote is restored (later values win,
tombstones delete), what aborted ones wrote is not; an empty partition restores at once; the YAML refuses a
changelog the transaction cannot carry, and the topics a pipeline needs include the compacted changelogs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from stylus.config import Pipeline, PipelineError, parse_pipeline
from stylus.kafka.admin import pipeline_topics
from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import read_topic
from stylus.kafka.settings import client_config
from stylus.runtime import changelog
from stylus.runtime.changelog import RestoreResult, restore, write_changes
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.conftest import PipelineFactory

EXACTLY_ONCE = {"state": "exactly_once", "output": "exactly_once"}


def changelog_pipeline(pipeline_factory: PipelineFactory) -> tuple[str, str, Pipeline]:
    _, pipeline = pipeline_factory({
        "topics": {"events": {"partitions": 2}, "more": {"partitions": 3}, "counts": {"partitions": 1}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["events", "more"], "outputs": ["counts"],
            "semantics": EXACTLY_ONCE, "state": {"changelog": True},
        }},
    })
    events = pipeline.processors["counter"].inputs[0]
    return pipeline.changelog_topic("counter", events), events, pipeline


class Recording(RocksKV):
    """A RocksKV that notes the size of each write batch."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batches: list[int] = []

    def write(self, changes: Mapping[bytes, bytes | None]) -> None:
        if changes:
            self.batches.append(len(changes))
        super().write(changes)


def stored(kv: RocksKV) -> dict[bytes, bytes]:
    return dict(kv.scan(b""))


def test_restore_reads_committed_changes_only(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic, _, pipeline = changelog_pipeline(pipeline_factory)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"changelog-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    assert write_changes(producer, topic, 1, {b"a": b"1", b"b": b"1", b"c": b"1"}) == 3
    producer.commit_transaction(30)
    producer.begin_transaction()
    assert write_changes(producer, topic, 1, {b"a": b"2", b"b": None}) == 2  # an overwrite and a tombstone
    producer.commit_transaction(30)
    producer.begin_transaction()
    assert write_changes(producer, topic, 1, {b"c": b"aborted", b"d": b"aborted"}) == 2
    assert producer.flush(30) == 0  # in the log, so only the abort can hide them
    producer.abort_transaction(30)

    uncommitted = [(m.partition(), m.key(), m.value()) for m in read_topic(bootstrap, topic,
                                                                             isolation="read_uncommitted")]
    assert (1, b"d", b"aborted") in uncommitted and {p for p, _, _ in uncommitted} == {1}  # the explicit partition
    end = end_offsets(bootstrap, [(topic, 1)])[(topic, 1)][1]
    assert end == 10  # 7 records and 3 transaction markers: the restore must read past the last (abort) marker

    config = client_config("consumer", bootstrap, pipeline, "counter")
    reports: list[tuple[int, int]] = []
    kv = RocksKV(tmp_path / "restored")  # one write batch: `a` overwritten and `b` deleted inside it
    try:
        result = restore(config, topic, 1, kv, progress=lambda done, total: reports.append((done, total)))
        assert stored(kv) == {b"a": b"2", b"c": b"1"}
        assert result.records == 5  # the aborted two never arrive
        assert result.bytes == 5 + 4  # keys 1 byte each, values "1" x 4 (the tombstone has none)
        assert reports and reports[-1] == (end, end)
        assert all(done <= total == end for done, total in reports)
    finally:
        kv.close()

    monkeypatch.setattr(changelog, "RESTORE_BATCH", 2)  # several write batches: a later one deletes `b`
    small = Recording(tmp_path / "restored-in-batches")
    try:
        assert restore(config, topic, 1, small).records == 5
        assert stored(small) == {b"a": b"2", b"c": b"1"}
        assert len(small.batches) >= 3 and max(small.batches) <= 2
    finally:
        small.close()

    other = RocksKV(tmp_path / "partition-0")  # partition 0 of the same changelog got nothing
    try:
        assert restore(client_config("consumer", bootstrap, pipeline, "counter"), topic, 0, other).records == 0
        assert stored(other) == {}
    finally:
        other.close()


@pytest.mark.parametrize(("upto", "expected"), [
    (None, {b"a": b"3", b"b": b"1"}),  # to the end
    (30, {b"a": b"3", b"b": b"1"}),
    (20, {b"a": b"2", b"b": b"1"}),  # the group committed 20: the checkpoint to 30 is another owner's, later
    (19, {b"a": b"1"}),
    (5, {}),
])
def test_a_restore_for_a_committed_offset_stops_at_the_first_later_checkpoint(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, upto: int | None,
        expected: dict[bytes, bytes]) -> None:
    """Each checkpoint's changes start with the mark of the input offset they bring the state to. While a
    restore reads, the partition may move on to another owner (this instance frozen, or a zombie): its later
    checkpoints are not part of the state of the committed offset the restore is for (chaos seed
    540000000464: they were, and the replay past that offset applied their records a second time)."""
    topic, _, pipeline = changelog_pipeline(pipeline_factory)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"changelog-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    for offset, changes in ((10, {b"a": b"1"}), (20, {b"a": b"2", b"b": b"1"}), (30, {b"a": b"3"})):
        producer.begin_transaction()
        assert write_changes(producer, topic, 0, changes, offset=offset) == len(changes) + 1
        producer.commit_transaction(30)
    kv = RocksKV(tmp_path / "restored")
    try:
        restore(client_config("consumer", bootstrap, pipeline, "counter"), topic, 0, kv, upto=upto)
        state = stored(kv)
        mark = state.pop(PartitionStore.OFFSET_KEY, None)
        assert state == expected
        assert mark is None if upto == 5 else PartitionStore.offset_of(mark) == (  # type: ignore[arg-type]
            30 if upto is None else max(o for o in (10, 20, 30) if o <= upto))
    finally:
        kv.close()


def test_an_empty_partition_restores_at_once(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    topic, _, pipeline = changelog_pipeline(pipeline_factory)
    reports: list[tuple[int, int]] = []
    kv = RocksKV(tmp_path / "empty")
    started = time.monotonic()
    try:
        result = restore(client_config("consumer", bootstrap, pipeline, "counter"), topic, 1, kv,
                         progress=lambda done, total: reports.append((done, total)))
        assert isinstance(result, RestoreResult) and result.records == 0 and result.bytes == 0
        assert stored(kv) == {} and reports == [(0, 0)]
    finally:
        kv.close()
    assert time.monotonic() - started < 5


def test_a_partition_with_only_an_aborted_transaction_restores_nothing(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    topic, _, pipeline = changelog_pipeline(pipeline_factory)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"changelog-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    write_changes(producer, topic, 0, {b"x": b"aborted"})
    assert producer.flush(30) == 0
    producer.abort_transaction(30)
    kv = RocksKV(tmp_path / "aborted")
    started = time.monotonic()
    try:  # the end (2: a record and the abort marker) is past anything read_committed delivers
        assert restore(client_config("consumer", bootstrap, pipeline, "counter"), topic, 0, kv).records == 0
        assert stored(kv) == {}
    finally:
        kv.close()
    assert time.monotonic() - started < 10  # reached the end, not the stall timeout


# --- the YAML ------------------------------------------------------------------------------------

YAML = """\
pipeline: demo
topics:
  events: {partitions: 4}
  counts: {partitions: 1}
processors:
  counter:
    class: tests.apps.counting:WordCount
    inputs: [events]
    outputs: [counts]
    semantics: SEMANTICS
    state: STATE
"""


def parse(semantics: str, state: str = "{changelog: true}") -> Pipeline:
    return parse_pipeline(YAML.replace("SEMANTICS", semantics).replace("STATE", state), file="p.yaml")


@pytest.mark.parametrize(("semantics", "state", "where", "message", "fix"), [
    ("{output: at_least_once}", "{changelog: true}", "p.yaml:6: processors.counter",
     "this processor is stateless", "{state: exactly_once, output: exactly_once}"),
    ("{state: exactly_once, output: at_least_once}", "{changelog: true}", "p.yaml:6: processors.counter",
     "needs exactly-once state and output", "inside the Kafka transaction that commits the outputs and input"),
    ("{state: at_least_once, output: at_least_once}", "{changelog: true}", "p.yaml:6: processors.counter",
     "(state=at_least_once, output=at_least_once)", "use `semantics: {state: exactly_once, output: exactly_once}`"),
    ("{state: exactly_once, output: at_least_once}", "{changelog: true, backend: postgres, dsn: 'host=db'}",
     "p.yaml:11: processors.counter.state", "with `backend: postgres` the database is the durable copy",
     "remove `changelog`, or use `backend: rocksdb`"),
], ids=["stateless", "at-least-once-output", "at-least-once-state", "postgres"])
def test_a_changelog_the_transaction_cannot_carry_is_refused(
        semantics: str, state: str, where: str, message: str, fix: str) -> None:
    with pytest.raises(PipelineError) as info:
        parse(semantics, state)
    text = str(info.value)
    assert text.startswith(f"{where}: "), text
    assert message in text.split("fix: ", 1)[0] and fix in text.split("fix: ", 1)[1], text


def test_pipeline_topics_add_a_compacted_changelog_per_input(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    plain = parse("{state: exactly_once, output: exactly_once}", "{}")
    assert not plain.processors["counter"].state.changelog
    assert not [t for t in pipeline_topics(plain) if t.endswith(".changelog")]
    assert parse("{state: exactly_once, output: exactly_once}").changelog_topic("counter", "events") == \
        "demo.counter.events.changelog"

    topic, events, pipeline = changelog_pipeline(pipeline_factory)  # created on the broker by the factory
    more = pipeline.processors["counter"].inputs[1]
    wanted = {pipeline.changelog_topic("counter", t): pipeline.topics[t].partitions
              for t in (events, more)}
    specs = pipeline_topics(pipeline)
    assert {t: s.partitions for t, s in specs.items() if t.endswith(".changelog")} == wanted == \
        {topic: 2, pipeline.changelog_topic("counter", more): 3}
    assert all(specs[t].serde == "bytes" and specs[t].config == {"cleanup.policy": "compact"} for t in wanted)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10).topics
    assert {t: len(meta[t].partitions) for t in wanted} == wanted
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in wanted]
    for future in admin.describe_configs(resources).values():
        assert future.result(30)["cleanup.policy"].value == "compact"
