"""Deterministic reproductions of violations the chaos matrix found (tests/chaos/harness.py, bench/chaos.py).

Status against the stylus/ code of the time: 1 fixed in d73c950 (it fails on c0c97ab..b912fa6); 2 and 3 open (they
fail on d73c950, and on 6c54235 before the recovery rewrite).

1. State saved ahead of the group's committed offset is applied again. The checkpoint writes state and offset
   first (RocksDB, or the PostgreSQL monoid table) and commits the offset to the consumer group after; when that
   commit fails (a rebalance, a broker restart: `PendingCheckpoint._commit_failed`), the group lags the state.
   The next owner must resume where the state is, not where the group is, or it applies those records twice.
   Found by the matrix as exactly-once state over-counting after a broker restart (shared/broker_restart/eo-amo,
   seed 233) and at-most-once monoid state over-counting (monoid/broker_restart/amo-amo, seed 209). Reproduced
   here by moving the group's offset back while no instance runs, as the failed commit leaves it.
2. At-most-once output held for partitions that were lost is released later: a frozen instance (SIGSTOP)
   loses its partitions to another instance, which processes the same records again; once resumed, the old
   instance's next checkpoint (or its final one at SIGTERM) releases the output it held for them, so those
   records have two outputs (windows/zombie/eo-amo, seed 153; pipeline/zombie/eo-amo, seed 178;
   counter/zombie/eo-amo, seed 368).
3. Timers fired again after a restore from a backup, with at-most-once output: the catch-up replay from the
   backup's offset to the group's sets again the timers the old owner fired in between, and nothing tells it
   they fired (record ids exist only on exactly-once output), so they fire again and their outputs are repeated
   (windows/machine_loss/amo-amo, seeds 277 and 397; windows/machine_loss/eo-amo, seed 518; pipeline/zombie/
   amo-amo, seed 297; windows/zombie/amo-amo, seed 392).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from stylus.kafka.reader import read_topic
from stylus.monoid.pg import default_table
from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import target_for
from tests.chaos.harness import fresh_database
from tests.conftest import PipelineFactory
from tests.support.chaos import Instance, Rec, all_committed, produce_now, store_states, topic_ends, wait_until
from tests.support.cli import run_stylus

KEYS = [f"w{i}" for i in range(10)]
FAST_GROUP = {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 15000}}


def _records(count: int) -> list[Rec]:
    return [Rec(KEYS[i % len(KEYS)], {"k": KEYS[i % len(KEYS)], "i": i}, 1_700_000_000_000 + i) for i in range(count)]


def _move_group_back(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit `offsets` for the group while none of its members runs (what a failed commit leaves behind)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("backend", ["rocksdb", "postgres"])
def test_state_saved_ahead_of_the_groups_committed_offset_is_not_applied_again(
        backend: str, bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    with fresh_database() as dsn:
        state: dict[str, Any] = {"dir": str(tmp_path / "state")}
        cls = "tests.chaos.apps:KeyCounter"
        if backend == "postgres":
            state |= {"backend": "postgres", "dsn": dsn}
            cls = "tests.chaos.apps:EmittingCount"
        path, pipeline = pipeline_factory({
            "kafka": FAST_GROUP,
            "topics": {"events": {"partitions": 2}, "counts": {"partitions": 2}},
            "processors": {"counter": {
                "class": cls, "inputs": ["events"], "outputs": ["counts"],
                "semantics": {"state": "exactly_once", "output": "at_least_once"},
                "checkpoint": {"interval": "500ms"}, "state": state,
            }}})
        events = pipeline.processors["counter"].inputs[0]
        group = pipeline.group_id("counter")
        records = _records(4000)
        truth = Counter(rec.key for rec in records if rec.key is not None)
        produce_now(bootstrap, events, records)

        def counted() -> dict[str, int]:
            if backend == "postgres":
                with psycopg.connect(dsn) as conn:
                    table = default_table(pipeline.pipeline, "counter")
                    return {k: int(v) for k, v in conn.execute(f'SELECT key, value FROM "{table}"').fetchall()}
            total: Counter[str] = Counter()
            for part in store_states(tmp_path / "state" / pipeline.pipeline / "counter").values():
                total.update({k: int(v) for k, v in part.items()})
            return dict(total)

        first = run_stylus("run", str(path), "--exit-when-idle", "2", bootstrap=bootstrap, timeout=120)
        assert first.returncode == 0, first.stderr[-3000:]
        assert counted() == dict(truth)
        assert all_committed(bootstrap, group, events, 2)
        # the state holds every record; the group's commit lags it by half, as a failed commit leaves it
        ends = topic_ends(bootstrap, events, 2)
        _move_group_back(bootstrap, group, events, {p: high // 2 for p, (_, high) in ends.items()})

        second = run_stylus("run", str(path), "--exit-when-idle", "2", bootstrap=bootstrap, timeout=120)
        assert second.returncode == 0, second.stderr[-3000:]
        got = counted()
        assert got == dict(truth), (
            f"exactly-once state counted records again (state, truth): "
            f"{ {k: (got.get(k), n) for k, n in truth.items() if got.get(k) != n} }\n{second.stderr[-3000:]}")


def test_at_most_once_output_held_for_lost_partitions_is_never_released(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path_a, pipeline = pipeline_factory({
        "kafka": FAST_GROUP,
        "topics": {"events": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"counter": {
            # 3 ms a record: the input is never all consumed while the test runs, so output stays held
            # between checkpoints, which come every 30 s
            "class": "tests.chaos.apps:SlowCounter", "config": {"sleep_ms": 3}, "batch_size": 50,
            "inputs": ["events"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "at_most_once"},
            "checkpoint": {"interval": "30s"}, "state": {"dir": str(tmp_path / "state-a")},
        }}})
    doc = yaml.safe_load(path_a.read_text())
    doc["processors"]["counter"]["state"]["dir"] = str(tmp_path / "state-b")  # another machine
    doc["processors"]["counter"]["config"] = {"sleep_ms": 0}
    path_b = tmp_path / "b.yaml"
    path_b.write_text(yaml.safe_dump(doc, sort_keys=False))
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    produce_now(bootstrap, events, _records(6000))

    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a")
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")
    a.start()
    try:
        wait_until(lambda: a.says("assigned") or not a.alive, 60, "A to be assigned", explain=a.tail)
        # the fault's moment: A processes ~300 records a second and checkpoints every 30 s, so 2 s after its
        # assignment it holds ~600 outputs (the held output itself is what no outsider can see)
        time.sleep(2.0)
        assert a.alive, a.tail()
        a.pause()
        b.start()  # takes both partitions once A's session has expired, processes everything, releases its output
        wait_until(lambda: all_committed(bootstrap, group, events, 2), 90, "B to process all the input",
                   interval=0.3, explain=b.tail)
        mark = len(a.log_text())
        a.resume()
        # the worker's own line (librdkafka's session time-out line comes first and says less)
        wait_until(lambda: not a.alive or "counter: lost " in a.log_text()[mark:], 60,
                   "A to find out it lost its partitions", explain=a.tail)
        a.terminate(60)
        b.terminate(60)
    finally:
        a.kill()
        b.kill()
    outputs = Counter(orjson.loads(m.value() or b"{}")["src"] for m in read_topic(bootstrap, counts))
    twice = sorted((src for src, n in outputs.items() if n > 1), key=lambda s: (s.rsplit(":", 2)[1], int(
        s.rsplit(":", 1)[1])))
    assert not twice, (f"{len(twice)} inputs have two outputs (at-most-once output), e.g. {twice[:5]}: A released "
                       f"output it held for partitions it had lost\n{a.tail()}")



def test_a_restore_with_at_most_once_output_does_not_fire_the_old_owners_timers_again(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    path, pipeline = pipeline_factory({
        "kafka": FAST_GROUP,
        "topics": {"events": {"partitions": 2}, "sums": {"partitions": 2}},
        "processors": {"win": {
            "class": "tests.chaos.apps:TimerWindowSum", "config": {"window_ms": 2000},
            "inputs": ["events"], "outputs": ["sums"],
            "semantics": {"state": "exactly_once", "output": "at_most_once"},
            "event_time": {"field": "ts", "allowed_lateness": "1s"}, "checkpoint": {"interval": "300ms"},
            "state": {"dir": str(tmp_path / "state"), "backup": {"uri": f"file://{backups}", "interval": "1s"}},
        }}})
    events, sums = pipeline.processors["win"].inputs[0], pipeline.processors["win"].outputs[0]
    group = pipeline.group_id("win")
    base = 1_700_000_000_000 - 1_700_000_000_000 % 2000

    def phase(first: int, count: int) -> list[Rec]:  # 4 keys, 10 ms of event time apart, in order
        return [Rec(f"k{i % 4}", {"k": f"k{i % 4}", "ts": base + i * 10, "amount": 1 + i % 5, "i": i}, base + i * 10)
                for i in range(first, first + count)]

    repos = [PartitionBackups(target_for(f"file://{backups}"), pipeline.pipeline, "win", events, p) for p in (0, 1)]
    a = Instance(path, tmp_path / "a.log", bootstrap, name="a")
    restarted = Instance(path, tmp_path / "a.log", bootstrap, name="a-new-machine")
    produce_now(bootstrap, events, phase(0, 1000))  # event time 0..10 s
    a.start()
    try:
        wait_until(lambda: all_committed(bootstrap, group, events, 2), 60, "phase 1 processed", interval=0.3,
                   explain=a.tail)
        ends = topic_ends(bootstrap, events, 2)
        wait_until(lambda: all(_backed_up_to(r) == ends[r.partition][1] for r in repos), 30, "backups of phase 1",
                   interval=0.3, explain=a.tail)
        # the backup target breaks (its directory is a file now): phase 2 is processed with no backup after it
        shutil.move(str(backups), str(tmp_path / "backups-kept"))
        backups.write_text("not a directory")
        produce_now(bootstrap, events, phase(1000, 1000))  # event time 10..20 s: windows up to ~18 s close
        wait_until(lambda: all_committed(bootstrap, group, events, 2) and sum(
            1 for r in read_topic(bootstrap, sums) if orjson.loads(r.value() or b"{}")["start"] >= base + 14_000)
            >= 4 * 2, 60, "phase 2's windows emitted", interval=0.3, explain=a.tail)
        a.kill()  # the machine is lost; its backups come back
        shutil.rmtree(tmp_path / "state")
        backups.unlink()
        shutil.move(str(tmp_path / "backups-kept"), str(backups))
        restarted.start(exit_when_idle=3)
        wait_until(lambda: restarted.says("assigned") or not restarted.alive, 60, "the restore", explain=restarted.tail)
        produce_now(bootstrap, events, [Rec("zz", {"k": "zz", "ts": base + 10**9, "amount": 0, "i": -1}, base + 10**9,
                                            p) for p in (0, 1)])
        assert restarted.wait(120) == 0, restarted.tail()
    finally:
        a.kill()
        restarted.kill()
    assert restarted.says("restored"), restarted.tail()
    emitted = Counter((v["key"], v["start"] - base) for v in (orjson.loads(m.value() or b"{}")
                                                              for m in read_topic(bootstrap, sums)) if v["key"] != "zz")
    twice = sorted(w for w, n in emitted.items() if n > 1)
    assert not twice, (f"{len(twice)} windows emitted twice (at-most-once output), e.g. {twice[:6]}: timers the old "
                       f"owner fired after its last backup fired again\n{restarted.tail()}")


def _backed_up_to(repo: PartitionBackups) -> int | None:
    newest = repo.newest()
    return None if newest is None else newest.offset
