"""`stylus lag` on a known backlog, cross-checked against kcat reading the same group offsets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from confluent_kafka import Producer

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.monitoring.lag import format_table, pipeline_lag
from stylus.runtime.runner import PipelineRunner
from tests.support.cli import run_stylus
from tests.support.tools import needs

DOC = {
    "topics": {"words": {"partitions": 2}, "counts": {"partitions": 1}},
    "processors": {
        "count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"]},
        "copy": {"class": "tests.apps.counting:Passthrough", "inputs": ["words"], "outputs": ["counts"],
                 "semantics": {"output": "at_least_once"}},
    },
}


def produce_at(bootstrap: str, topic: str, n: int, first_ms: int, start: int = 0) -> None:
    """n records spread over both partitions (even i -> 0, odd -> 1), record i stamped first_ms + i."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, json.dumps({"i": i}).encode(), f"w{i}".encode(), partition=i % 2,
                         timestamp=first_ms + (i - start))
    assert producer.flush(30) == 0


def kcat_env(tmp_path: Path) -> dict[str, str]:
    """Debian's kcat 1.7.1 links librdkafka 2.0.2, which cannot parse the embedded broker's ApiVersion v3
    answer (\"Read underflow\"; measured). kcat's own code runs unchanged against the librdkafka that
    confluent-kafka bundles (same ABI); against real Kafka the system library works as is."""
    import confluent_kafka

    libs = sorted((Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*.so*"))
    env = dict(os.environ)
    if libs:
        (tmp_path / "librdkafka.so.1").symlink_to(libs[0])
        env["LD_LIBRARY_PATH"] = str(tmp_path)
    return env


def kcat_backlog(bootstrap: str, group: str, topic: str, env: dict[str, str]) -> dict[int, list[tuple[int, int]]]:
    """Join `group` with kcat (no commits) and read to the end: partition -> [(offset, timestamp)]."""
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-G", group, "-e", "-q", "-f", "%p %o %T\n",
         "-X", "enable.auto.commit=false", "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
         "-X", "heartbeat.interval.ms=1000",
         # the group keeps the protocol its last members used: Stylus workers join cooperative-sticky
         "-X", "partition.assignment.strategy=cooperative-sticky", topic],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    seen: dict[int, list[tuple[int, int]]] = {}
    for line in out.split("\n"):
        if line.strip():
            p, o, t = map(int, line.split())
            seen.setdefault(p, []).append((o, t))
    return seen


@needs(shutil.which("kcat"), "kcat (Debian package)")
def test_lag_matches_known_backlog_and_kcat(bootstrap, pipeline_factory, tmp_path):
    path, pipeline = pipeline_factory(DOC, name="lag")
    topic = next(iter(pipeline.topics))
    create_topics(bootstrap, pipeline_topics(pipeline))
    now_ms = int(time.time() * 1000)
    produce_at(bootstrap, topic, 40, now_ms - 600_000)
    # `count` consumes everything there is, checkpoints and stops; `copy` never runs
    assert PipelineRunner(pipeline, bootstrap, ["count"], exit_when_idle=0.5).run(install_signals=False) == 0
    produce_at(bootstrap, topic, 30, now_ms - 300_000, start=40)  # the backlog: 15 per partition

    before = time.time()
    result = run_stylus("lag", str(path), "--json", bootstrap=bootstrap)
    after = time.time()
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["partitions"]
    by = {(r["processor"], r["partition"]): r for r in rows}
    assert sorted(by) == [("copy", 0), ("copy", 1), ("count", 0), ("count", 1)]

    # the known answer
    for p in (0, 1):
        count, copy = by[("count", p)], by[("copy", p)]
        assert (count["committed"], count["end"], count["lag_messages"]) == (20, 35, 15)
        assert (copy["committed"], copy["end"], copy["lag_messages"]) == (None, 35, 35)
        first_unprocessed = now_ms - 300_000 + p  # record 40 (p0) / 41 (p1)
        assert count["oldest_unprocessed_ms"] == first_unprocessed
        assert before - first_unprocessed / 1000 <= count["lag_seconds"] <= after - first_unprocessed / 1000
        assert copy["oldest_unprocessed_ms"] == now_ms - 600_000 + p

    # the independent answer: kcat joins each group and reads from its committed offsets to the end
    env = kcat_env(tmp_path)
    for name in ("count", "copy"):
        seen = kcat_backlog(bootstrap, pipeline.group_id(name), topic, env)
        for p in (0, 1):
            row = by[(name, p)]
            offsets = [o for o, _ in seen[p]]
            assert offsets[0] == (row["committed"] or 0)
            assert offsets[-1] + 1 == row["end"]
            assert len(offsets) == row["lag_messages"]
            assert seen[p][0][1] == row["oldest_unprocessed_ms"]


def test_caught_up_is_zero_and_table_totals(bootstrap, pipeline_factory):
    _, pipeline = pipeline_factory(DOC, name="lag0")
    topic = next(iter(pipeline.topics))
    create_topics(bootstrap, pipeline_topics(pipeline))
    produce_at(bootstrap, topic, 10, int(time.time() * 1000) - 60_000)
    assert PipelineRunner(pipeline, bootstrap, exit_when_idle=0.5).run(install_signals=False) == 0
    rows = pipeline_lag(pipeline, bootstrap)
    assert sorted((r.processor, r.partition, r.committed, r.end, r.lag_messages, r.lag_seconds) for r in rows) == [
        ("copy", 0, 5, 5, 0, 0.0), ("copy", 1, 5, 5, 0, 0.0),
        ("count", 0, 5, 5, 0, 0.0), ("count", 1, 5, 5, 0, 0.0),
    ]
    table = format_table(rows).splitlines()
    assert table[0].split() == ["processor", "topic", "partition", "committed", "end", "lag", "lag_seconds"]
    assert [line.split()[-2:] for line in table if "(total)" in line] == [["0", "0.0"], ["0", "0.0"]]
