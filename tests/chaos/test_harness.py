"""The chaos harness's own judgement (tests/chaos/harness.py), where it is more than a comparison."""

from __future__ import annotations

from collections.abc import Callable

from stylus.kafka.reader import read_topic
from tests.chaos.harness import resent_copies
from tests.support.kafka import produce


def test_the_later_copy_of_a_record_the_broker_holds_twice_is_told_apart(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """An idempotent producer's retry across an unclean broker restart can be written again (chaos seed
    3240000309: 451 input records twice); only the later copies may rightly be dropped as late."""
    topic = topic_factory("resent", partitions=1)
    produce(bootstrap, topic, [("k", {"k": "k", "i": i}) for i in [*range(10), 3, 4, 5, 10]])
    inputs = read_topic(bootstrap, topic)
    assert resent_copies(inputs) == {f"{topic}:0:10", f"{topic}:0:11", f"{topic}:0:12"}
