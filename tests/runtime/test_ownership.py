"""Ownership marks in the offset metadata (docs/semantics.md, R1 and O1-O3): a partition's next owner fences the
producer that may still hold a transaction open on it, and nobody else.

Both tests run `stylus run` processes of an exactly-once counter on the real broker.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from stylus.kafka.reader import read_topic
from stylus.runtime.transactions import RELEASED, empty_state_at, owner_to_fence
from tests.conftest import PipelineFactory
from tests.support.chaos import Feeder, Instance, Rec, all_committed, produce_now, wait_until
from tests.support.kafka import read_json

FAST_GROUP = {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}}
KEYS = 10


def _doc(state_dir: Path) -> dict[str, Any]:
    return {
        "kafka": FAST_GROUP,
        "topics": {"events": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"counter": {
            "class": "tests.chaos.apps:KeyCounter", "inputs": ["events"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "checkpoint": {"interval": "500ms"}, "state": {"dir": str(state_dir)},
        }}}


def _other_machine(path: Path, state_dir: Path) -> Path:
    """The same pipeline with a state directory of its own."""
    doc = yaml.safe_load(path.read_text())
    doc["processors"]["counter"]["state"]["dir"] = str(state_dir)
    other = path.with_name(f"{path.stem}-{state_dir.name}.yaml")
    other.write_text(yaml.safe_dump(doc, sort_keys=False))
    return other


def _records(count: int, seed: int = 5) -> list[Rec]:
    rng = random.Random(seed)
    return [Rec(f"w{rng.randrange(KEYS)}", {"i": i}, 1_700_000_000_000 + i) for i in range(count)]


def _metadata(bootstrap: str, group: str, topic: str, partitions: int) -> list[str | None]:
    """The metadata of the group's last stable commits (read_uncommitted: no wait on a pending one)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"})
    try:
        return [tp.metadata for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)]
    finally:
        consumer.close()


def _open_transaction_on(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Output partitions whose read_committed end (last stable offset) is short of their end: a transaction
    is still open on them."""
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso-probe", "isolation.level": "read_committed"})
    anyone = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso-probe", "isolation.level": "read_uncommitted"})
    try:
        return [p for p in range(partitions)
                if committed.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
                < anyone.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]]
    finally:
        committed.close()
        anyone.close()


def _counts_exact(outputs: list[dict[str, Any]], truth: Counter[str]) -> list[str]:
    per_key: dict[str, list[int]] = {}
    for out in outputs:
        per_key.setdefault(out["key"], []).append(out["count"])
    return [f"{key}: {sorted(per_key.get(key, []))[:5]}..." for key, n in truth.items()
            if sorted(per_key.get(key, [])) != list(range(1, n + 1))]


def _a_crashes_then_b_finishes(a: Instance, b: Instance, left_behind: Callable[[], None]) -> None:
    """A runs until its first checkpoint kills it (STYLUS_FAULT_KILL_AFTER), `left_behind` checks what it left,
    then B, another machine, runs to the end and exits cleanly."""
    a.start()
    try:
        assert a.wait(120) not in (None, 0), a.tail()  # killed at its first checkpoint's stage
        left_behind()
        b.start(exit_when_idle=3)
        code_b = b.wait(180)
    finally:
        a.kill()
        b.kill()
    assert code_b == 0, b.tail()


def test_a_crashed_owners_open_transaction_is_aborted_by_the_partitions_next_owner(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """A is SIGKILLed in its first checkpoint, its transaction open with outputs in it: only its claim (O1)
    names it. B, another machine, fences it on assignment, so once B is done nothing is left open on the
    output (without the fence it would stay open until the transaction timed out, 30 s on)."""
    path_a, pipeline = pipeline_factory(_doc(tmp_path / "state-a"))
    path_b = _other_machine(path_a, tmp_path / "state-b")
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    records = _records(6000)
    produce_now(bootstrap, events, records)

    # killed in its first checkpoint's stage, 2 s after it: its producer has sent the outputs the transaction
    # holds by then, however busy the machine (without the pause they were at times still in the client)
    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a",
                 env={"STYLUS_FAULT_PAUSE_AFTER": "txn.stage:1:2", "STYLUS_FAULT_KILL_AFTER": "txn.stage:1"})
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")
    claims: set[str | None] = set()

    def left_behind() -> None:
        claims.update(owner_to_fence(m) for m in _metadata(bootstrap, group, events, 2))
        assert len(claims) == 1 and None not in claims, claims  # both partitions claimed by A's producer
        assert _open_transaction_on(bootstrap, counts, 2), "A's outputs should still be in its open transaction"

    _a_crashes_then_b_finishes(a, b, left_behind)
    (owner,) = claims
    assert b.says(f"fencing {owner}"), b.tail()
    assert not _open_transaction_on(bootstrap, counts, 2), blocked(b)
    assert all_committed(bootstrap, group, events, 2)
    bad = _counts_exact(read_json(bootstrap, counts), Counter(rec.key for rec in records if rec.key))
    assert not bad, bad


def blocked(instance: Instance) -> str:
    return f"an output partition still has an open transaction after B ended\n{instance.tail()}"


def test_a_clean_hand_over_releases_the_partitions_and_fences_nobody(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """A runs alone, B joins (a rebalance moves a partition to B), both end when idle: every revocation
    released its partitions (O3), so nobody was fenced and no work was replayed, and the last commits of both
    partitions say `released`."""
    path_a, pipeline = pipeline_factory(_doc(tmp_path / "state-a"))
    path_b = _other_machine(path_a, tmp_path / "state-b")
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    records = _records(12_000)
    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a")
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")
    feeder = Feeder(bootstrap, events, records, 1500)
    a.start(exit_when_idle=3)
    try:
        wait_until(lambda: a.says("assigned") or not a.alive, 60, "A to be assigned", explain=a.tail)
        feeder.start()
        wait_until(lambda: feeder.sent >= 3000, 30, "some input", explain=a.tail)
        b.start(exit_when_idle=3)
        wait_until(lambda: b.says("assigned events") or not b.alive, 60, "B to be assigned a partition",
                   explain=b.tail)
        feeder.join_checked(60)
        code_a, code_b = a.wait(180), b.wait(180)
    finally:
        feeder.stop_flag.set()
        a.kill()
        b.kill()
    assert code_a == 0 and code_b == 0, a.tail() + b.tail()
    for instance in (a, b):
        assert not instance.says("fencing") and not instance.says("was fenced"), instance.tail()
        assert not instance.says("replaying"), instance.tail()
    assert all((m or "").startswith(f"{RELEASED}@") for m in _metadata(bootstrap, group, events, 2))
    assert all_committed(bootstrap, group, events, 2)
    bad = _counts_exact(read_json(bootstrap, counts), Counter(rec.key for rec in records if rec.key))
    assert not bad, bad


def test_a_partition_claimed_at_its_start_is_not_mistaken_for_lost_state(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """The input's first records are deleted (retention) before the group ever commits; A claims both partitions
    at their start (`start@`) and is SIGKILLed before its first checkpoint. B, another machine, finds a
    committed offset and no state, but the claim says the state there is empty: it starts, rather than
    refuse for want of the deleted records, and its counts are exact."""
    path_a, pipeline = pipeline_factory(_doc(tmp_path / "state-a"))
    path_b = _other_machine(path_a, tmp_path / "state-b")
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    produce_now(bootstrap, events, _records(6000))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(events, p, 500) for p in range(2)]).values():
        future.result(30)
    kept = [m.key().decode() for m in read_topic(bootstrap, events, isolation="read_uncommitted")]
    assert len(kept) == 5000

    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a", env={"STYLUS_FAULT_KILL_AFTER": "txn.stage:1"})
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")
    def claimed_at_the_start() -> None:
        assert all(empty_state_at(m) for m in _metadata(bootstrap, group, events, 2))

    _a_crashes_then_b_finishes(a, b, claimed_at_the_start)
    assert all_committed(bootstrap, group, events, 2)
    bad = _counts_exact(read_json(bootstrap, counts), Counter(kept))
    assert not bad, bad
