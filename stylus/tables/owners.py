"""Who serves which table partition: the serving group's assignment, and each member's advertised address.

Every `stylus serve` instance is a member of the consumer group `<pipeline>.serve`, subscribed to the topics
of the partitioned tables; the group's assignment says which instance holds which table partition. An
instance advertises its HTTP address in its member's `client.id` (`stylus-serve@HOST:PORT`), which the
group's description (DescribeGroups) returns with each member's assignment: no other topic or registry to
keep consistent with the group. A group that is not `Stable` is rebalancing: no owner is trusted then.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

PREFIX = "stylus-serve@"
#: how long an answer of the group's description is reused (a rebalance noticed locally refreshes it at once)
CACHE_SECONDS = 2.0


def client_id(address: str) -> str:
    return PREFIX + address


def address_of(client: str) -> str | None:
    return client[len(PREFIX):] if client.startswith(PREFIX) else None


class Owners:
    def __init__(self, admin: AdminClient, group: str) -> None:
        self.admin = admin
        self.group = group
        self._lock = threading.Lock()
        self._map: dict[tuple[str, int], str] | None = None  # None: rebalancing (or not known yet)
        self._at = 0.0

    def owner_of(self, topic: str, partition: int) -> str | None:
        """The address of the member holding `topic[partition]`; None while the group rebalances."""
        owners = self._current()
        return None if owners is None else owners.get((topic, partition))

    def invalidate(self) -> None:
        with self._lock:
            self._at = 0.0

    def _current(self) -> dict[tuple[str, int], str] | None:
        with self._lock:
            if time.monotonic() - self._at < CACHE_SECONDS:
                return self._map
            try:
                self._map = self._describe()
            except Exception:  # the coordinator moving: nobody is trusted until it answers
                self._map = None
            self._at = time.monotonic()
            return self._map

    def _describe(self) -> dict[tuple[str, int], str] | None:
        description: Any = self.admin.describe_consumer_groups([self.group], request_timeout=5)[self.group].result()
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
