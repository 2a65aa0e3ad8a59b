"""Machine loss: two instances share a backup URI; one is SIGKILLed and its state dir deleted; the survivor
restores the lost partitions from the backups, replays up to the group's committed offsets with output
suppressed, and the final state and output are exact."""

from __future__ import annotations

import collections
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import target_for
from tests.state.helpers import caught_up, held_partitions, read_state, wait_for
from tests.support.cli import start_stylus
from tests.support.hdfs import MiniHdfs
from tests.support.kafka import produce, read_json

PARTS = 4
KEYS = [f"w{i}" for i in range(40)]


def batch(start: int, n: int) -> list[tuple[str, dict[str, int]]]:
    return [(KEYS[(start + i) % len(KEYS)], {"n": start + i}) for i in range(n)]


@pytest.mark.parametrize("semantics", [
    {"state": "exactly_once", "output": "at_least_once"},
    {"state": "exactly_once", "output": "exactly_once"},
], ids=["eo-state", "eo-state-eo-output"])
def test_survivor_restores_from_backup_and_output_is_exact(
        semantics: dict[str, str], pipeline_factory: Any, bootstrap: str, tmp_path: Path,
        mini_hdfs: MiniHdfs, hdfs_uri: str) -> None:
    uri = hdfs_uri
    path_a, pipeline = pipeline_factory({
        "topics": {"words": {"partitions": PARTS}, "counts": {"partitions": PARTS}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": semantics, "checkpoint": {"interval": "300ms"},
            "state": {"dir": str(tmp_path / "state-a"), "backup": {"uri": uri, "interval": "500ms", "keep": 3,
                                                                 "timeout": "2s"}},
        }},
    })
    doc = yaml.safe_load(path_a.read_text())
    doc["processors"]["counter"]["state"]["dir"] = str(tmp_path / "state-b")
    path_b = tmp_path / "b.yaml"
    path_b.write_text(yaml.safe_dump(doc, sort_keys=False))
    words, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)  # before producing: no auto-created topic
    group = pipeline.group_id("counter")
    store_dir = lambda side: tmp_path / f"state-{side}" / pipeline.pipeline / "counter"  # noqa: E731
    target = target_for(uri, timeout=5)
    repos = [PartitionBackups(target, pipeline.pipeline, "counter", words, p) for p in range(PARTS)]

    sent = produce(bootstrap, words, batch(0, 2000))
    # a alone consumes phase 1 and backs every partition up; then b joins and takes some of them over from
    # those backups (it never held them: no local copy)
    a = start_stylus("run", str(path_a), "--processor", "counter", bootstrap=bootstrap, log=tmp_path / "a.log")
    b = None
    try:
        wait_for(lambda: caught_up(bootstrap, group, words, PARTS), 60, "a to consume phase 1")
        newest = lambda r: (m.offset or 0) if (m := r.newest()) is not None else 0  # noqa: E731
        wait_for(lambda: sum(newest(r) for r in repos) == sent, 30, "backups of phase 1")
        backed = {r.partition: newest(r) for r in repos}
        b = start_stylus("run", str(path_b), "--processor", "counter", bootstrap=bootstrap, log=tmp_path / "b.log")
        wait_for(lambda: held_partitions((tmp_path / "b.log").read_text(), words), 60, "b to own partitions")

        # phase 2 is processed and committed while the target refuses: the backups fall behind the group. The
        # NameNode refuses every new file under the base path (a full namespace quota), as a real HDFS does
        mini_hdfs.fill_quota(uri)
        sent += produce(bootstrap, words, batch(sent, 1500))
        wait_for(lambda: caught_up(bootstrap, group, words, PARTS), 60, "phase 2 to be committed")
        wait_for(lambda: "NameSpace quota" in (tmp_path / "a.log").read_text(), 30,
                 "the NameNode to refuse a's backups")

        # machine loss: SIGKILL a, delete its state; b must take over a's partitions from the backups
        owned_by_a = [f"{words}-{p}" for p in held_partitions((tmp_path / "a.log").read_text(), words)]
        assert owned_by_a, "a holds no partition to lose"
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        killed = time.monotonic()
        shutil.rmtree(tmp_path / "state-a")
        mini_hdfs.clear_quota(uri)
        # the lost partitions' newest backups are still phase 1's (b's own may back up again once healed)
        lost = {int(name.rsplit("-", 1)[1]) for name in owned_by_a}
        assert {r.partition: newest(r) for r in repos if r.partition in lost} == {
            p: n for p, n in backed.items() if p in lost}
        sent += produce(bootstrap, words, batch(sent, 500))
        wait_for(lambda: caught_up(bootstrap, group, words, PARTS), 90, "b to take over and catch up")
        recovery = time.monotonic() - killed
        print(f"\n[{semantics['output']}] recovered {owned_by_a} and caught up {recovery:.1f}s after SIGKILL")
        b.send_signal(signal.SIGTERM)
        assert b.wait(30) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)

    log_b = (tmp_path / "b.log").read_text()
    for name in owned_by_a:  # b never held a's partitions: it restores them from the backups, then replays
        part = int(name.rsplit("-", 1)[1])
        assert f"restored {words}[{part}] to offset {backed[part]}" in log_b, log_b[-3000:]
        assert f"{words}[{part}]: replayed offsets {backed[part]}.." in log_b, log_b[-3000:]

    expected = collections.Counter(KEYS[i % len(KEYS)] for i in range(sent))
    assert read_state(store_dir("b")) == dict(expected)
    outputs = read_json(bootstrap, counts, isolation="read_committed")
    per_key: dict[str, list[int]] = collections.defaultdict(list)
    for out in outputs:
        per_key[out["word"]].append(out["count"])
    # exact: every count 1..n exactly once per key (no replayed duplicates, nothing lost)
    assert {k: sorted(v) for k, v in per_key.items()} == {k: list(range(1, n + 1)) for k, n in expected.items()}
