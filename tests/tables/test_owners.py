"""Who owns which table partition, from the serving group's description on the real broker: a Stable
group's assignment with each member's advertised address, nothing while it rebalances, and a description
asked for before a local rebalance never used after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from stylus.tables.owners import Owners, client_id
from tests.conftest import unique
from tests.support.chaos import wait_until


@pytest.fixture
def members() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for consumer in made:
        consumer.close()


def _join(bootstrap: str, group: str, topic: str, address: str, members: list[Consumer]) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id(address),
                         "partition.assignment.strategy": "range", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])
    members.append(consumer)
    return consumer


def _settle(members: list[Consumer]) -> dict[tuple[str, int], str]:
    """Poll every member until each has its partitions; the assignment they agree on."""
    def assigned() -> dict[tuple[str, int], str] | None:
        for consumer in members:
            consumer.poll(0.05)
        owners: dict[tuple[str, int], str] = {}
        for consumer, address in zip(members, ("10.0.0.1:8090", "10.0.0.2:8090"), strict=False):
            for tp in consumer.assignment():
                owners[(tp.topic, tp.partition)] = address
        return owners if all(consumer.assignment() for consumer in members) else None

    found: dict[tuple[str, int], str] = wait_until(assigned, 60, "every member assigned")
    return found


def _refreshed(owners: Owners, members: list[Consumer]) -> Callable[[], bool]:
    def check() -> bool:
        for consumer in members:
            consumer.poll(0.02)  # heartbeats
        owners.refresh()
        return owners.map is not None

    return check


def test_a_stable_group_gives_each_partition_its_members_address_and_invalidate_forgets_it(
        bootstrap: str, topic_factory: Callable[..., str], members: list[Consumer]) -> None:
    topic, group = topic_factory("owned", partitions=4), unique("serve")
    _join(bootstrap, group, topic, "10.0.0.1:8090", members)
    _join(bootstrap, group, topic, "10.0.0.2:8090", members)
    expected = _settle(members)
    owners = Owners(AdminClient({"bootstrap.servers": bootstrap}), group)
    assert owners.owner_of(topic, 0) is None  # nothing described yet: nobody trusted
    wait_until(_refreshed(owners, members), 30, "the group described")
    assert owners.map == expected
    assert {owners.owner_of(topic, p) for p in range(4)} == {"10.0.0.1:8090", "10.0.0.2:8090"}
    owners.invalidate()
    assert owners.owner_of(topic, 0) is None  # at once, before any new description


def test_a_description_asked_before_invalidate_is_dropped(
        bootstrap: str, topic_factory: Callable[..., str], members: list[Consumer]) -> None:
    topic, group = topic_factory("owned", partitions=2), unique("serve")
    _join(bootstrap, group, topic, "10.0.0.1:8090", members)
    expected = _settle(members)
    owners = Owners(AdminClient({"bootstrap.servers": bootstrap}), group)
    owners.refresh()
    assert owners.waiting
    owners.invalidate()  # a local rebalance while the description is on its way

    def answered() -> bool:
        members[0].poll(0.02)
        owners.refresh()
        return not owners.waiting

    wait_until(answered, 30, "the earlier description answered")
    assert owners.map is None  # taken, it would have been the pre-rebalance assignment
    wait_until(_refreshed(owners, members), 30, "the group described again")
    assert owners.map == expected


def test_a_group_nobody_serves_has_no_owner(bootstrap: str) -> None:
    owners = Owners(AdminClient({"bootstrap.servers": bootstrap}), unique("serve"))
    owners.refresh()

    def answered() -> bool:
        owners.refresh()
        return not owners.waiting

    wait_until(answered, 30, "the description answered")
    assert owners.map is None and owners.owner_of("any", 0) is None
