"""Machine loss with an exactly-once timer processor: every timer output appears exactly once.

The old owner fires timers for records after its last backup; the survivor restores the backup and
replays those records. The replayed timers that the old owner already fired must not fire again, not
right away (the transactional skip set would hide that) and not after the survivor has committed and
restarted (when only the state can remember them). So the test keeps the survivor's watermark still
while it commits the taken-over partitions, restarts it, and only then lets the watermark run to the end.
"""

from __future__ import annotations

import collections
import json
import shutil
import signal
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import target_for
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.state.helpers import caught_up, held_partitions, lagging, wait_for
from tests.support.cli import start_stylus
from tests.support.hdfs import MiniHdfs
from tests.support.kafka import read_raw

PARTS = 4
BASE = 1_000_000  # event time of record 0 (ms); record i has ts BASE + 10 i, its timer fires at ts + 1000
END = 10**12  # the last records' event time: the watermark passes every other timer


def produce_to(bootstrap: str, topic: str, items: list[tuple[int, str, int]]) -> int:
    """(partition, id, ts) records to explicit partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for partition, rid, ts in items:
        producer.produce(topic, json.dumps({"id": rid, "ts": ts}).encode(), rid.encode(), partition=partition)
    assert producer.flush(30) == 0
    return len(items)


def fired_ids(bootstrap: str, topic: str) -> list[str]:
    """The ids in the timer outputs visible to read_committed readers, with repeats."""
    return [json.loads(v)["id"] for m in read_raw(bootstrap, topic) if (v := m.value()) is not None]


def records(start: int, stop: int, partitions: list[int]) -> list[tuple[int, str, int]]:
    return [(partitions[i % len(partitions)], str(i), BASE + 10 * i) for i in range(start, stop)]


def test_timer_outputs_are_exactly_once_after_machine_loss(pipeline_factory: Any, bootstrap: str, tmp_path: Path,
                                                           mini_hdfs: MiniHdfs, hdfs_uri: str) -> None:
    uri = hdfs_uri
    path_a, pipeline = pipeline_factory({
        "topics": {"events": {"partitions": PARTS}, "alarms": {"partitions": 2}},
        "processors": {"alarm": {
            "class": "tests.apps.timed:Alarm", "inputs": ["events"], "outputs": ["alarms"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "checkpoint": {"interval": "300ms"},
            # idle partitions never release the watermark here: the test decides when it moves
            "event_time": {"field": "ts", "allowed_lateness": "0s", "idle_timeout": "1h"},
            "state": {"dir": str(tmp_path / "state-a"), "backup": {"uri": uri, "interval": "500ms", "keep": 3,
                                                                 "timeout": "2s"}},
        }},
    })
    doc = yaml.safe_load(path_a.read_text())
    doc["processors"]["alarm"]["state"]["dir"] = str(tmp_path / "state-b")
    path_b = tmp_path / "b.yaml"
    path_b.write_text(yaml.safe_dump(doc, sort_keys=False))
    events, alarms = pipeline.processors["alarm"].inputs[0], pipeline.processors["alarm"].outputs[0]
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    group = pipeline.group_id("alarm")
    store_dir = lambda side: tmp_path / f"state-{side}" / pipeline.pipeline / "alarm"  # noqa: E731
    target = target_for(uri, timeout=5)
    repos = [PartitionBackups(target, pipeline.pipeline, "alarm", events, p) for p in range(PARTS)]
    everyone = list(range(PARTS))
    done = lambda: caught_up(bootstrap, group, events, PARTS)  # noqa: E731
    lag = lambda: f"(committed, end) of the partitions behind: {lagging(bootstrap, group, events, PARTS)}"  # noqa: E731

    sent = produce_to(bootstrap, events, records(0, 800, everyone))
    a = start_stylus("run", str(path_a), "--processor", "alarm", bootstrap=bootstrap, log=tmp_path / "a.log")
    b = start_stylus("run", str(path_b), "--processor", "alarm", bootstrap=bootstrap, log=tmp_path / "b.log")
    procs = [a, b]
    try:
        wait_for(lambda: done() and all(store_dir(s).is_dir() and any(store_dir(s).iterdir()) for s in "ab"), 60,
                 "both instances to own partitions and consume phase 1", explain=lag)
        wait_for(lambda: sum((m.offset or 0) if (m := r.newest()) else 0 for r in repos) == sent, 30,
                 "backups of phase 1")

        # phase 2 while the target refuses (a full namespace quota: the NameNode refuses every new file): the old
        # owner fires the timers of phase 1's tail and most of phase 2's, after its last backup
        mini_hdfs.fill_quota(uri)
        sent += produce_to(bootstrap, events, records(800, 1400, everyone))
        wait_for(done, 60, "phase 2 to be committed", explain=lag)
        owned_by_a = held_partitions((tmp_path / "a.log").read_text(), events)
        assert owned_by_a and len(owned_by_a) < PARTS
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        shutil.rmtree(tmp_path / "state-a")
        mini_hdfs.clear_quota(uri)

        # phase 3 only on the lost partitions: b takes them over, replays phase 2 and commits new input on
        # them, while its own partitions hold the watermark where it was (no timer is due)
        sent += produce_to(bootstrap, events, records(1400, 1500, owned_by_a))
        wait_for(done, 90, "b to take over and commit phase 3", explain=lag)
        b.send_signal(signal.SIGTERM)
        assert b.wait(30) == 0

        # b again, then the end of time on every partition: every remaining timer fires now
        b = start_stylus("run", str(path_b), "--processor", "alarm", bootstrap=bootstrap, log=tmp_path / "b2.log")
        procs.append(b)
        sent += produce_to(bootstrap, events, [(p, f"end-{p}", END) for p in everyone])
        expected = {str(i) for i in range(1500)}
        wait_for(done, 60, "the end records", explain=lag)
        try:
            wait_for(lambda: expected <= set(fired_ids(bootstrap, alarms)), 30, "every timer to fire")
        except AssertionError as exc:  # which ones, and are they in the topic at all (uncommitted)?
            missing = sorted(expected - set(fired_ids(bootstrap, alarms)), key=int)
            raw = {json.loads(v)["id"] for m in read_raw(bootstrap, alarms, isolation="read_uncommitted")
                   if (v := m.value()) is not None}
            raise AssertionError(f"{exc}: {len(missing)} missing, first {missing[:20]}; in the topic uncommitted: "
                                 f"{sorted(set(missing) & raw, key=int)[:20]}") from exc
        b.send_signal(signal.SIGTERM)
        assert b.wait(30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    log_b = (tmp_path / "b.log").read_text()
    for p in owned_by_a:  # from its backup, or from b's own copy where the group gave b the partition before
        assert f"restored {events}[{p}] to offset" in log_b or f"{events}[{p}]: replayed offsets" in log_b, \
            log_b[-3000:]
    fired = collections.Counter(fired_ids(bootstrap, alarms))
    duplicates = {k: n for k, n in fired.items() if n != 1}
    assert not duplicates, f"timer outputs not exactly once: {sorted(duplicates.items())[:20]}"
    assert set(fired) == expected
    # each timer output says where in its input partition it fired: a replay places it exactly there
    positions = [dict(m.headers() or []).get("stylus.at") for m in read_raw(bootstrap, alarms)]
    assert positions and all(p is not None and p.isdigit() for p in positions), positions[:5]
    # the state holds exactly the timers that are still due: the end records' own
    for path in sorted(p for p in store_dir("b").iterdir() if (p / "CURRENT").exists()):
        store = PartitionStore(RocksKV(path))
        try:
            assert store.timers.pop_due(END * 2) == [(END + 1000, f"end-{path.name.rsplit('-', 1)[1]}")]
        finally:
            store.close()
