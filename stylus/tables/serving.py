"""One `stylus serve` instance: the pipeline's tables held locally and kept current, and the answer to a
lookup (docs/tables.md, "Serving").

- Global tables: every instance holds all of them, so any instance answers.
- Partitioned tables: the instances form the consumer group `<pipeline>.serve` over the tables' topics; the
  group's assignment says which instance holds which partition (the member never fetches through it: its
  partitions are paused, a group-less follower reads them into the copies). A key's partition is the Java
  partitioner's (murmur2), as every producer of the runtime writes it. An instance answers the partitions it
  holds and has caught up; it forwards the others to their owner (stylus/tables/owners.py). While the group
  rebalances, and whenever ownership is not certain, the answer is 503 with Retry-After, never a value that
  might be wrong.

Threads: the Kafka side (membership, catch-up, following, describing the group) runs on the thread that
calls `run`; the HTTP side (stylus/tables/http.py, its own thread) only reads the copies, the `ready` set
and the owners' map, which the Kafka side replaces whole.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition, murmur2
from confluent_kafka.admin import AdminClient

from stylus.config.model import Pipeline
from stylus.kafka.callbacks import subscribe
from stylus.kafka.settings import client_config
from stylus.serde import encode_key
from stylus.tables.owners import Owners, client_id
from stylus.tables.registry import TableRegistry

log = logging.getLogger(__name__)

RETRY_AFTER = "1"  # seconds: about one rebalance of a small group with the default timeouts


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    forward_to: str | None = None  # the owner's address: the HTTP layer forwards the request there


def error_answer(status: int, message: str, *headers: tuple[str, str]) -> Answer:
    return Answer(status, orjson.dumps({"error": message}), headers)


class ServingInstance:
    def __init__(self, pipeline: Pipeline, bootstrap: str, directory: Path, address: str) -> None:
        """`address`: this instance's advertised HTTP address (HOST:PORT) for forwarded requests."""
        self.pipeline = pipeline
        self.address = address
        self.group = f"{pipeline.pipeline}.serve"
        self.registry = TableRegistry(pipeline, list(pipeline.tables), directory / pipeline.pipeline / "serve",
                                      client_config("consumer", bootstrap, pipeline), owner="serve", by_topic=True)
        self.partitioned = {name for name, t in pipeline.tables.items() if t.placement == "partitioned"}
        self.topics = sorted({pipeline.tables[name].topic for name in self.partitioned})
        self.consumer: Consumer | None = None
        if self.topics:
            self.consumer = Consumer(client_config(
                "consumer", bootstrap, pipeline, None,
                {"partition.assignment.strategy": "range"},  # eager: a rebalance revokes, then assigns
                **{"group.id": self.group, "client.id": client_id(address)}))
        self.owners = Owners(AdminClient(client_config("admin", bootstrap, pipeline)), self.group)
        self.ready: frozenset[tuple[str, int]] = frozenset()  # (table, partition) held and caught up
        self.settled = not self.topics  # False while the group rebalances (from a revocation to an assignment)
        self.stop = threading.Event()

    # ---------------------------------------------------------------- the Kafka side (one thread)
    def start(self) -> None:
        """Open and catch up every table (global ones whole; partitioned ones as assigned), join the group."""
        for name in self.pipeline.tables:
            self.registry.open(name)
        if self.consumer is not None:
            subscribe(self.consumer, self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                      on_lost=self._on_revoke)

    def run(self) -> None:
        """Until `stop`: keep the group membership and apply what arrives on the tables' topics."""
        while not self.stop.is_set():
            if self.consumer is not None:
                # partitions paused: callbacks and heartbeats only; shorter while a description is awaited
                self.consumer.poll(0.005 if self.owners.waiting else 0.05)
                self.owners.refresh()
            self.registry.follower.poll(0.05 if self.consumer is None else 0.0)

    def close(self) -> None:
        self.settled = False
        self.ready = frozenset()
        if self.consumer is not None:
            self.consumer.close()  # leaves the group: the others take its partitions over
        self.registry.close()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.settled = False
        self.owners.invalidate()
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.ready = frozenset((n, p) for n, p in self.ready if (self.pipeline.tables[n].topic, p) not in gone)
        self.registry.revoked(gone)
        consumer.unassign()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)  # membership only: the follower reads the tables
        self.registry.assigned([(tp.topic, tp.partition) for tp in partitions])
        self.ready = frozenset((name, p) for name in self.partitioned
                               for p in self.registry.tables[name].stores)
        self.owners.invalidate()
        self.settled = True
        log.info("serve: holding %s", ", ".join(f"{n}[{p}]" for n, p in sorted(self.ready)) or "no partition")

    # ---------------------------------------------------------------- lookups (any thread)
    def lookup(self, name: str, key: str, *, forwarded: bool) -> Answer:
        table = self.registry.tables.get(name)
        if table is None:
            return error_answer(404, f"no table `{name}`")
        raw = encode_key(key)
        assert raw is not None
        now = int(time.time() * 1000)
        if table.whole is not None:
            return self._answer(table.codec.value(self._read(table.whole, raw), now))
        partition = int(murmur2(raw, table.partitions))
        if self.settled and (name, partition) in self.ready:
            store = table.stores.get(partition)
            if store is not None:
                try:
                    found = self._read(store, raw)
                except Exception:  # closed under us by a revocation: the partition is moving
                    return self._moving()
                if self.settled and (name, partition) in self.ready:  # still ours once read
                    return self._answer(table.codec.value(found, now))
        if forwarded or not self.settled:  # the owner asked says it is not (yet) the owner: moving
            return self._moving()
        owner = self.owners.owner_of(table.topic, partition)
        if owner is None or owner == self.address:
            return self._moving()
        return Answer(0, b"", forward_to=owner)

    @staticmethod
    def _read(store: Any, raw: bytes) -> tuple[int, bytes] | None:
        result: tuple[int, bytes] | None = store.get(raw)
        return result

    @staticmethod
    def _answer(value: Any) -> Answer:
        if value is None:
            return error_answer(404, "no such key")
        return Answer(200, orjson.dumps(value))

    @staticmethod
    def _moving() -> Answer:
        return error_answer(503, "the table partition is moving between instances (a rebalance): retry",
                      ("Retry-After", RETRY_AFTER))
