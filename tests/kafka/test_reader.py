"""Range reads: exact at every boundary, nothing for an empty topic."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import RecordsDeleted, read_range, read_topic
from tests.support.kafka import produce


def test_read_range_is_exact_at_every_boundary(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("range", partitions=1)
    produce(bootstrap, topic, [(None, {"i": i}) for i in range(500)])
    chunks = [(0, 137), (137, 138), (138, 400), (400, 500)]
    offsets = [m.offset() for start, end in chunks for m in read_range(bootstrap, {(topic, 0): (start, end)})]
    assert offsets == list(range(500))
    assert list(read_range(bootstrap, {(topic, 0): (500, 500)})) == []
    assert [m.offset() for m in read_topic(bootstrap, topic)] == list(range(500))


def test_empty_topic_reads_nothing(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("empty", partitions=3)
    assert read_topic(bootstrap, topic) == []
    assert all(high == 0 for _, high in end_offsets(bootstrap, [(topic, p) for p in range(3)]).values())


def test_a_range_whose_records_retention_deleted_fails_clearly(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"deleted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.ms": "60000", "retention.ms": "60000"})])[
        topic].result(30)
    # record times a minute apart every 100 records: a segment each, all long past retention but the active one
    produce(bootstrap, topic, [(None, {"i": i}) for i in range(2000)],
            timestamps=[1_700_000_000_000 + (i // 100) * 60_000 for i in range(2000)])
    deadline = time.monotonic() + 60
    while end_offsets(bootstrap, [(topic, 0)])[(topic, 0)][0] == 0:  # Kafka's cleaner runs every second here
        assert time.monotonic() < deadline, "retention deleted nothing within 60 s"
        time.sleep(0.2)
    started = time.monotonic()
    with pytest.raises(RecordsDeleted, match=rf"{topic}\[0\] no longer holds offset 0: retention"):
        list(read_range(bootstrap, {(topic, 0): (0, 2000)}))
    assert time.monotonic() - started < 10  # an answer, not a read that waits out its timeout
