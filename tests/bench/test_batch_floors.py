"""bench/batch.py's floors do the work they stand for: the client's floor (with or without decoding each value)
produces exactly as many outputs as the filter or the totals make, skipping the consumer's end-of-partition events
as the raw loop does, and the batch engine's floor forwards the same records unchanged, with nothing decoded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer

from bench.batch import floor_body
from bench.engine_overhead import BATCH, OUTPUT, queue_only_producer, read_messages
from stylus.testing import TestDriver

RECORDS = 3000


@pytest.fixture(scope="module")
def msgs(bootstrap: str) -> list[Any]:
    return read_messages(RECORDS, bootstrap)


@pytest.mark.parametrize("decode", [False, True], ids=["floor", "floor+decode"])
@pytest.mark.parametrize("stateful", [False, True], ids=["filter", "totals"])
def test_the_client_floor_produces_as_many_outputs_as_the_work(msgs: list[Any], bootstrap: str,
                                                                topic_factory: Callable[..., str], stateful: bool,
                                                                decode: bool) -> None:
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": lambda err, msg: delivered.append(err)})
    positions: dict[int, int] = {}
    out = topic_factory()
    handled = sum(floor_body(msgs[i:i + BATCH], producer, out, {}, positions, stateful, True, decode=decode)
                  for i in range(0, len(msgs), BATCH))
    assert producer.flush(30) == 0
    assert handled == len(msgs)
    assert delivered == [None] * (len(msgs) if stateful else sum(m.offset() % 5 < 3 for m in msgs))
    assert positions == {p: max(m.offset() for m in msgs if m.partition() == p) + 1 for p in positions}


def read_with_end(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    """`values` written to `topic`, read back as the raw loop reads them: the records, then the partition's end
    (an event, `enable.partition.eof`)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, b"k")
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    consumer.subscribe([topic])
    events: list[Any] = []
    while not any(m.error() is not None for m in events):
        events += consumer.consume(10, 1.0)
    consumer.close()
    return events


def test_the_client_floor_skips_end_of_partition_events(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    events = read_with_end(bootstrap, topic_factory(), [b'{"type": "post"}'])
    positions: dict[int, int] = {}
    sink = queue_only_producer()
    assert floor_body(events, sink, OUTPUT, {}, positions, True, True, decode=True) == 1
    assert positions == {0: 1}
    sink.purge()


def test_the_client_floor_with_decoding_decodes(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    events = read_with_end(bootstrap, topic_factory(), [b"{not json"])
    sink = queue_only_producer()
    assert floor_body(events, sink, OUTPUT, {}, {}, True, True) == 1  # no decoding: taken as it is
    with pytest.raises(orjson.JSONDecodeError):  # each value goes through the decoder
        floor_body(events, sink, OUTPUT, {}, {}, True, True, decode=True)
    sink.purge()


PIPELINE = """
pipeline: floors
topics:
  in: {{partitions: 1}}
  out: {{partitions: 1}}
processors:
  p:
    class: bench.batch:{cls}
    inputs: [in]
    outputs: [out]
"""


@pytest.mark.parametrize(("cls", "kept"), [("FloorBatch", [0, 1, 2, 5, 6, 7, 10, 11]),
                                           ("FloorBatchAll", list(range(12)))])
def test_the_engine_floor_forwards_the_floor_records_undecoded(tmp_path: Any, cls: str, kept: list[int]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(cls=cls))
    values = [b"not json %d" % i for i in range(12)]  # raw input: nothing is decoded, so nothing fails
    with TestDriver(path) as driver:
        driver.send_many("in", values, keys=[f"k{i}" for i in range(12)])
        out = driver.outputs("out")
    assert [(r.value, r.key) for r in out] == [(values[i], f"k{i}") for i in kept]
