"""Who serves which table partition: the serving group's assignment, and each member's advertised address.

Every `stylus serve` instance is a member of the consumer group `<pipeline>.serve`, subscribed to the topics
of the partitioned tables; the group's assignment says which instance holds which table partition. An
instance advertises its HTTP address in its member's `client.id` (`stylus-serve@HOST:PORT`), which the
group's description (DescribeGroups) returns with each member's assignment: no other topic or registry to
keep consistent with the group. A group that is not `Stable` is rebalancing: no owner is trusted then.

The description is asked for by the Kafka side (`refresh`, called from its loop, never waits for the
answer); HTTP requests only read the last map, which `refresh` replaces whole, so a lookup never waits
for the group coordinator.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

PREFIX = "stylus-serve@"
#: how long a description of the group is used before it is asked for again (a local rebalance: at once)
CACHE_SECONDS = 2.0
#: how soon to ask again when the last description trusted no owner (the group rebalancing, or no answer)
UNKNOWN_SECONDS = 0.2
REQUEST_TIMEOUT = 5.0


def client_id(address: str) -> str:
    return PREFIX + address


def address_of(client: str) -> str | None:
    return client[len(PREFIX):] if client.startswith(PREFIX) else None


class Owners:
    def __init__(self, admin: AdminClient, group: str) -> None:
        self.admin = admin
        self.group = group
        self.map: dict[tuple[str, int], str] | None = None  # None: rebalancing (or not known yet)
        self._due = 0.0  # when to ask for the next description
        self._pending: tuple[int, Future[Any]] | None = None  # (generation asked in, the answer to come)
        self._generation = 0  # bumped by `invalidate`: an answer to an older question is dropped

    # ---------------------------------------------------------------- any thread
    def owner_of(self, topic: str, partition: int) -> str | None:
        """The address of the member holding `topic[partition]`; None while the group rebalances."""
        owners = self.map
        return None if owners is None else owners.get((topic, partition))

    # ---------------------------------------------------------------- the Kafka side's thread
    @property
    def waiting(self) -> bool:
        """A description has been asked for and not answered yet."""
        return self._pending is not None

    def invalidate(self) -> None:
        """The assignment changed (a local rebalance): trust no owner until the group is described again."""
        self.map = None
        self._generation += 1
        self._due = 0.0

    def refresh(self) -> None:
        """Ask for the group's description when due; take its answer once it has come. Never blocks."""
        if self._pending is not None:
            generation, future = self._pending
            if not future.done():
                return
            self._pending = None
            if generation != self._generation:
                self._due = 0.0  # asked before the rebalance: ask again
                return
            try:
                self.map = owners_in(future.result())
            except Exception:  # the coordinator moving: nobody is trusted until it answers
                self.map = None
            self._due = time.monotonic() + (CACHE_SECONDS if self.map is not None else UNKNOWN_SECONDS)
            return
        if time.monotonic() >= self._due:
            asked = self.admin.describe_consumer_groups([self.group], request_timeout=REQUEST_TIMEOUT)[self.group]
            self._pending = (self._generation, asked)


def owners_in(description: Any) -> dict[tuple[str, int], str] | None:
    """(topic, partition) -> the advertised address of its member; None unless the group is Stable."""
    if description.state != ConsumerGroupState.STABLE:
        return None
    owners: dict[tuple[str, int], str] = {}
    for member in description.members:
        address = address_of(member.client_id)
        if address is None or member.assignment is None:
            continue
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = address
    return owners
