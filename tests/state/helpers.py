"""Shared by the backup tests: group progress, waiting, reading a state directory."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from stylus.kafka.offsets import committed_offsets, end_offsets
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "client.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        tps = committed_offsets(consumer, [TopicPartition(topic, p) for p in range(partitions)], 10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def caught_up(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    return not lagging(bootstrap, group, topic, partitions)


def lagging(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Partition -> (group's committed offset, end offset) for every partition not caught up."""
    ends = end_offsets(bootstrap, [(topic, p) for p in range(partitions)])
    done = committed(bootstrap, group, topic, partitions)
    return {p: (done[p], ends[(topic, p)][1]) for p in range(partitions) if done[p] != ends[(topic, p)][1]}


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.3,
             explain: Callable[[], Any] | None = None) -> Any:
    """`explain`: what to add to the timeout's message (the state that kept `check` false)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    detail = f": {explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


def read_state(store_dir: Path) -> dict[str, Any]:
    """Union of every partition store under a processor's state directory."""
    merged: dict[str, Any] = {}
    for path in sorted(p for p in store_dir.iterdir() if (p / "CURRENT").exists()):
        store = PartitionStore(RocksKV(path))
        try:
            merged.update(store.state.items())
        finally:
            store.close()
    return merged


def held_partitions(log_text: str, topic: str) -> list[int]:
    """The partitions of `topic` a worker holds at the end of its log: its `assigned` lines less its
    `revoking` ones, in order (a state directory cannot tell: a partition that moved away leaves its folder)."""
    held: set[int] = set()
    for line in log_text.splitlines():
        for verb, change in ((": assigned ", held.add), (": revoking ", held.discard)):
            if verb in line:
                for part in line.split(verb, 1)[1].split(", "):
                    name = part.split("@", 1)[0].strip()
                    if name.startswith(f"{topic}[") and name.endswith("]"):
                        change(int(name[len(topic) + 1:-1]))
    return sorted(held)
