"""Spark's own Kafka source as a backfill's reader (`reader="kafka-source"`, stylus/backfill/source.py) gives the
same records to the same engine as the client reader: same outputs, same state, same next offsets, on a topic with
an aborted transaction (whose records neither may process), a committed one, and a partition that holds nothing
but the aborted records. Stateful (one unit per partition, several chunks), stateless (several units per partition:
several reads of the source) and monoid (per chunk, then the reduce) processors; offset and time bounds that cut
through the transactions."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from pydantic import ValidationError

from stylus import Processor, Record
from stylus.backfill.bounds import Bound, parse_bound
from stylus.backfill.job import BackfillResult, plan_for, run_plan
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.plan import Chunk, Plan, Unit
from stylus.backfill.source import ReaderError, java_connection, layers, read_options
from stylus.config.model import Pipeline
from stylus.eventtime.control import HEADERS, encode
from stylus.kafka.admin import create_topics, delete_topics
from stylus.kafka.settings import _connections


class HeaderEcho(Processor):
    """Emits the record's word and its headers: what the reader handed over, headers included."""

    def process(self, record: Record, ctx: Any) -> None:
        ctx.emit({"w": record.value["w"], "h": {k: v.decode() for k, v in record.headers.items()}}, key=record.key)


EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")
DOC: dict[str, dict[str, Any]] = {
    "topics": {"words": {"partitions": 3}, "counts": {"partitions": 2}, "copies": {"partitions": 2}},
    "processors": {
        "count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"]},
        "copy": {"class": "tests.backfill.test_kafka_source:HeaderEcho", "inputs": ["words"], "outputs": ["copies"],
                 "semantics": {"output": "at_least_once"}},  # stateless: one unit per chunk
        "pysum": {"class": "tests.apps.monoids:PySum", "inputs": ["words"]},
    },
}


def fill(bootstrap: str, topic: str) -> list[tuple[int, int, str, int]]:
    """Committed records (and three upstream control records among them), then an aborted transaction over all
    three partitions, more records, a committed transaction, more records. Partition 2 gets only the aborted
    records. Returns the committed records as (partition, offset, word, timestamp); every aborted record's word
    is `aborted`."""
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
    txn.init_transactions()
    kept: list[tuple[int, int, str, int]] = []

    def send(producer: Producer, partition: int, word: str, keep: bool, control: bool = False) -> None:
        # the wall clock, one record per millisecond: timestamps rise with the offsets in every partition, the
        # transaction markers' (the broker's clock when it writes them) included, as the time bounds assume; an
        # older made-up time would also fall out of the topic's retention
        time.sleep(0.0015)
        ts = int(time.time() * 1000)
        value = orjson.dumps({"k": word, "n": len(word) + ts // 1000 % 3, "w": word})

        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            if keep:
                kept.append((msg.partition(), msg.offset(), word, ts))

        if control:  # an upstream's watermark: told by its header, never processed
            producer.produce(topic, encode("up", "i0", [f"up:{partition}"], ts), None, partition=partition,
                             timestamp=ts, headers=HEADERS)
            return
        headers = [("trace", str(ts).encode())] if ts % 3 == 0 else None  # user headers: handed over as they are
        producer.produce(topic, value, word.encode(), partition=partition, timestamp=ts, headers=headers,
                         on_delivery=delivered)

    words = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu"]
    for i in range(60):
        send(plain, i % 2, words[i % 7], True)
        if i % 20 == 19:
            send(plain, i % 2, "", False, control=True)
    assert plain.flush(30) == 0
    txn.begin_transaction()
    for i in range(24):
        send(txn, i % 3, "aborted", False)
    txn.flush(30)
    txn.abort_transaction()
    for i in range(40):
        send(plain, i % 2, words[(i * 3) % 7], True)
    assert plain.flush(30) == 0
    txn.begin_transaction()
    for i in range(20):
        send(txn, i % 2, words[(i * 5) % 7], True)
    txn.commit_transaction()
    for i in range(30):
        send(plain, i % 2, words[(i * 2) % 7], True)
    assert plain.flush(30) == 0
    return sorted(kept)


@pytest.fixture(scope="module")
def topic_data(bootstrap: str, tmp_path_factory: Any) -> Iterator[tuple[Pipeline, list[tuple[int, int, str, int]]]]:
    """One filled topic for the module's tests (they only read it)."""
    suffix = uuid.uuid4().hex[:6]
    state = str(tmp_path_factory.mktemp("state"))
    pipeline = Pipeline.model_validate({
        "pipeline": f"src-{suffix}",
        "topics": {f"{t}-{suffix}": s for t, s in DOC["topics"].items()},
        "processors": {name: {**p, "inputs": [f"{t}-{suffix}" for t in p["inputs"]],
                              "outputs": [f"{t}-{suffix}" for t in p.get("outputs", [])], "state": {"dir": state}}
                       for name, p in DOC["processors"].items()},
    })
    create_topics(bootstrap, dict(pipeline.topics))
    yield pipeline, fill(bootstrap, f"words-{suffix}")
    delete_topics(bootstrap, list(pipeline.topics))


def both(spark: Any, pipeline: Pipeline, name: str, bootstrap: str, start: Bound = EARLIEST, stop: Bound = LATEST,
         chunk_size: int = 25) -> tuple[BackfillResult, BackfillResult, Plan]:
    plan = plan_for(pipeline, name, bootstrap, start, stop, chunk_size=chunk_size)
    client = run_plan(spark, pipeline, name, plan, OutputTarget(kind="collect"), return_state=True)
    source = run_plan(spark, pipeline, name, plan, OutputTarget(kind="collect"), return_state=True,
                      reader="kafka-source")
    assert {t["reader"] for t in client.tasks} == {"client"}
    assert {t["reader"] for t in source.tasks} == {"kafka-source"}  # the source did the reading, not a fallback
    assert len(source.tasks) == len(client.tasks) == len(plan.units)  # every unit once
    return client, source, plan


def emitted(result: BackfillResult) -> Counter[tuple[int, str | None, bytes]]:
    return Counter((e.input_partition, e.key, orjson.dumps(e.value)) for e in result.emitted)


def test_stateful_same_outputs_state_and_offsets(spark: Any, bootstrap: str, topic_data: Any) -> None:
    pipeline, kept = topic_data
    words = pipeline.processors["count"].inputs[0]
    client, source, plan = both(spark, pipeline, "count", bootstrap)
    assert len(plan.units) == 3 and max(len(u.chunks) for u in plan.units) > 1  # one unit per partition, chunked
    # what neither may see: the aborted records; partition 2 holds only those (and their marker)
    expected = {(words, p): dict(Counter(w for q, _, w, _ in kept if q == p)) for p in range(2)}
    expected[(words, 2)] = {}
    for result in (client, source):
        assert result.records == len(kept)
        assert {tp: s for tp, s in result.user_state().items() if s or tp == (words, 2)} == expected
        assert "aborted" not in {e.key for e in result.emitted}
    assert source.states == client.states  # user state and the stored next offset, byte for byte
    assert source.next_offsets == client.next_offsets
    assert source.next_offsets[(words, 2)] == plan.units[2].chunks[-1].end > 0  # past the aborted records
    # per input partition, the same outputs in the same order (a running count shows any reordering)
    order = [(e.input_partition, e.key, e.value) for e in client.emitted]
    assert [(e.input_partition, e.key, e.value) for e in source.emitted] == order
    assert len(order) == len(kept)


def test_stateless_and_monoid_processors(spark: Any, bootstrap: str, topic_data: Any) -> None:
    pipeline, kept = topic_data
    client, source, plan = both(spark, pipeline, "copy", bootstrap, chunk_size=20)
    per_partition = Counter((u.topic, u.partition) for u in plan.units)
    assert max(per_partition.values()) > 2  # several units of a partition: several reads of the source, unioned
    assert len(layers(plan)) == max(per_partition.values())
    assert source.records == client.records == len(kept)
    assert emitted(source) == emitted(client)
    want = sorted((w, (("trace", str(ts)),) if ts % 3 == 0 else ()) for *_, w, ts in kept)
    assert any(h for _, h in want) and not all(h for _, h in want)
    assert sorted((e.value["w"], tuple(e.value["h"].items())) for e in source.emitted) == want

    client, source, plan = both(spark, pipeline, "pysum", bootstrap, chunk_size=30)
    assert client.mode == source.mode == "monoid"
    words = pipeline.processors["pysum"].inputs[0]
    sums: dict[tuple[str, int], Counter[str]] = {}
    for p, _, w, ts in kept:
        sums.setdefault((words, p), Counter())[w] += len(w) + ts // 1000 % 3
    assert {tp: s for tp, s in source.user_state().items() if s} == {tp: dict(c) for tp, c in sums.items()}
    assert source.states == client.states and source.next_offsets == client.next_offsets


def test_bounds_inside_the_transactions(spark: Any, bootstrap: str, topic_data: Any) -> None:
    """Offset bounds that start and end inside the aborted transaction's and the markers' offsets, and time
    bounds (applied to the source's rows in Spark): the same records as the client reader reads."""
    pipeline, kept = topic_data
    words = pipeline.processors["count"].inputs[0]
    # partition 0: 30 records, 8 aborted ones, 20 records, the abort marker (the coordinator writes markers after
    # the abort returns), a committed transaction of 10 and its marker, 15 records. From inside the aborted records
    # to just past the commit marker (the last offset of the range is the marker); partition 2 (nothing but
    # aborted records) from inside them
    p0 = [o for p, o, *_ in kept if p == 0]
    gaps = [o for a, o in itertools.pairwise(p0) if o != a + 1]  # the first offsets after each run of non-records
    assert len(gaps) == 3 and gaps[0] - p0[29] == 9 and gaps[2] - p0[-16] == 2, p0
    start = parse_bound(f"offset:0={gaps[0] - 4},1=0,2=3", default="earliest")
    stop = parse_bound(f"offset:0={gaps[2]}", default="latest")
    client, source, _ = both(spark, pipeline, "count", bootstrap, start, stop)
    want = [k for k in kept if (k[0] == 0 and gaps[0] - 4 <= k[1] < gaps[2]) or k[0] == 1]
    assert client.records == source.records == len(want) == len(kept) - 30 - 15
    assert source.states == client.states and source.next_offsets == client.next_offsets
    assert source.next_offsets[(words, 0)] == gaps[2]

    times = sorted(ts for *_, ts in kept)
    lower, upper = times[25], times[-25]
    client, source, _ = both(spark, pipeline, "count", bootstrap, parse_bound(str(lower), default="earliest"),
                             parse_bound(str(upper), default="latest"))
    assert client.records == source.records == sum(1 for *_, ts in kept if lower <= ts < upper)
    assert source.states == client.states and emitted(source) == emitted(client)


def test_the_reader_is_checked(spark: Any, bootstrap: str, topic_data: Any) -> None:
    pipeline, _ = topic_data
    plan = plan_for(pipeline, "count", bootstrap, EARLIEST, LATEST)
    with pytest.raises(ValidationError):
        run_plan(spark, pipeline, "count", plan, reader="spark")  # type: ignore[arg-type]
    words = pipeline.processors["count"].inputs[0]
    archived = Plan(bootstrap=bootstrap, archive_root="/nowhere", units=(Unit(
        index=0, topic=words, partition=0, next_offset=10,
        chunks=(Chunk(source="archive", topic=words, partition=0, start=0, end=10, path="x.parquet"),)),))
    with pytest.raises(ReaderError, match="reads Kafka only"):
        run_plan(spark, pipeline, "count", archived, reader="kafka-source")


def test_layers_and_options() -> None:
    def unit(index: int, partition: int, *spans: tuple[int, int]) -> Unit:
        return Unit(index=index, topic="t", partition=partition, next_offset=spans[-1][1] if spans else 0,
                    chunks=tuple(Chunk(source="kafka", topic="t", partition=partition, start=s, end=e)
                                 for s, e in spans))

    plan = Plan(bootstrap="b:1", archive_root=None, units=(
        unit(0, 0, (0, 5), (5, 9)), unit(1, 1, (0, 5)), unit(2, 1, (5, 7)), unit(3, 2), unit(4, 1, (7, 7))))
    assert layers(plan) == [{("t", 0): (0, 9, 0), ("t", 1): (0, 5, 1)}, {("t", 1): (5, 7, 2)}]
    options = read_options("b:1", layers(plan)[0])
    assert orjson.loads(options["assign"]) == {"t": [0, 1]}
    assert orjson.loads(options["startingOffsets"]) == {"t": {"0": 0, "1": 0}}
    assert orjson.loads(options["endingOffsets"]) == {"t": {"0": 9, "1": 5}}
    assert options["kafka.isolation.level"] == "read_committed" and options["includeHeaders"] == "true"
    with pytest.raises(ReaderError, match="not contiguous"):
        layers(Plan(bootstrap="b:1", archive_root=None, units=(unit(0, 0, (0, 5), (6, 9)),)))


def test_connection_settings_for_the_java_client() -> None:
    _connections["secure:9093"] = {"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
                                   "sasl.username": "alice", "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem"}
    assert java_connection("secure:9093") == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            'password="p\\"w";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    _connections["odd:9093"] = {"ssl.keystore.location": "/k.p12"}
    with pytest.raises(ReaderError, match=r"ssl\.keystore\.location"):
        java_connection("odd:9093")
