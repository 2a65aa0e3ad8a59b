"""Range reads: exact at every boundary, nothing for an empty topic."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from stylus.kafka.offsets import end_offsets
from stylus.kafka.reader import RecordsDeleted, read_range, read_topic
from tests.support.kafka import produce, topic_with_deleted_records


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
    topic = topic_with_deleted_records(bootstrap)
    started = time.monotonic()
    with pytest.raises(RecordsDeleted, match=rf"{topic}\[0\] no longer holds offset 0: retention"):
        list(read_range(bootstrap, {(topic, 0): (0, 2000)}))
    assert time.monotonic() - started < 20  # an answer, not a read that waits out its 30 s timeout


def test_end_offsets_of_a_topic_whose_leaders_are_still_being_elected(bootstrap: str) -> None:
    """Asked right after CreateTopics returns, before every partition has a leader: answered once they have,
    not refused with NOT_LEADER_FOR_PARTITION (a fresh topic, a broker restart)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"fresh-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=8, replication_factor=1)])[topic].result(30)
    assert end_offsets(bootstrap, [(topic, p) for p in range(8)]) == {(topic, p): (0, 0) for p in range(8)}
