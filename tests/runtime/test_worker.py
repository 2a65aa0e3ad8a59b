"""The worker against the real broker: restarts after SIGKILL lose nothing, and instances of one processor
split the partitions and take over each other's on the way out (one machine, one shared state dir)."""

from __future__ import annotations

import random
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from stylus.config.model import FIGURE8_PAIRS
from stylus.kafka.broker import free_port
from stylus.runtime.worker import Worker
from tests.conftest import PipelineFactory
from tests.state.helpers import wait_for
from tests.support.chaos import group_offsets, topic_ends
from tests.support.cli import ROOT, run_stylus, stylus_cmd, stylus_env, wait_for_text
from tests.support.kafka import produce, read_raw
from tests.support.state import summed_state

PARTITIONS = 4


def metric(port: int, name: str) -> dict[str, float]:
    """A worker's /metrics samples of `name`, by their label text (none before it answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(name + "{")}


def counter_doc(interval: str = "200ms") -> dict[str, object]:
    return {
        "pipeline": "wc",
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}},
        "topics": {"words": {"partitions": PARTITIONS}, "counts": {"partitions": PARTITIONS}},
        "processors": {
            "counter": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                        "semantics": {"state": "at_least_once", "output": "at_least_once"},
                        "checkpoint": {"interval": interval}},
        },
    }


def final_state(state_dir: Path, pipeline: str, topic: str) -> Counter[str]:
    return summed_state(state_dir, pipeline, "counter", topic, PARTITIONS)


def start(path: Path, bootstrap: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(stylus_cmd("run", str(path), *extra), env=stylus_env(bootstrap), stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT)


def test_counts_are_exact_without_crashes_and_complete_after_sigkills(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(counter_doc())
    words = pipeline.processors["counter"].inputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    rng = random.Random(7)
    truth: Counter[str] = Counter()

    def feed(n: int) -> None:
        batch = [f"w{rng.randrange(40)}" for _ in range(n)]
        truth.update(batch)
        produce(bootstrap, words, [(w, {"w": w}) for w in batch])

    # no crash: exact
    feed(3000)
    clean = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap)
    assert clean.returncode == 0, clean.stderr
    assert final_state(tmp_path / "state", pipeline.pipeline, words) == truth
    # SIGKILL mid-stream three times, at random points, with input arriving in between
    log = tmp_path / "kill.log"
    kills = 0
    for round_ in range(3):
        feed(20000)
        proc = start(path, bootstrap, log)
        wait_for_text(log, "assigned", round_ + 1)
        time.sleep(rng.uniform(0.1, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += proc.returncode == -signal.SIGKILL
    assert kills == 3
    drain = run_stylus("run", str(path), "--exit-when-idle", "2", bootstrap=bootstrap)
    assert drain.returncode == 0, drain.stderr
    state = final_state(tmp_path / "state", pipeline.pipeline, words)
    assert set(state) == set(truth)
    short = {w: (state[w], n) for w, n in truth.items() if state[w] < n}
    assert not short, f"at-least-once lost counts: {short}"


def test_two_instances_split_partitions_and_hand_over(bootstrap: str, pipeline_factory: PipelineFactory,
                                                      tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(counter_doc())
    words = pipeline.processors["counter"].inputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    truth: Counter[str] = Counter(f"w{i % 50}" for i in range(4000))
    produce(bootstrap, words, [(f"w{i % 50}", {"i": i}) for i in range(4000)])
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start(path, bootstrap, log_a, "--instance", "a")
    wait_for_text(log_a, "assigned")
    b = start(path, bootstrap, log_b, "--instance", "b")
    try:
        wait_for_text(log_b, "assigned")  # cooperative rebalance: b gets a share, a keeps the rest

        def owned(log: Path) -> set[str]:
            text = log.read_text()
            return {part.split("@")[0].strip() for line in text.splitlines() if ": assigned " in line
                    for part in line.split(": assigned ", 1)[1].split(", ")}

        assert owned(log_b) and owned(log_a) - owned(log_b), (log_a.read_text(), log_b.read_text())
        produce(bootstrap, words, [(f"w{i % 50}", {"i": i}) for i in range(4000)])
        truth.update(f"w{i % 50}" for i in range(4000))
        time.sleep(2)
        b.send_signal(signal.SIGTERM)  # b leaves cleanly: final checkpoint, then its partitions move to a
        assert b.wait(timeout=60) == 0, log_b.read_text()[-2000:]
        produce(bootstrap, words, [(f"w{i % 50}", {"i": i}) for i in range(4000)])
        truth.update(f"w{i % 50}" for i in range(4000))
        wait_for_text(log_a, "assigned", 2)  # a takes b's partitions back
        time.sleep(3)
    finally:
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, log_a.read_text()[-2000:]
        if b.poll() is None:
            b.kill()
    assert final_state(tmp_path / "state", pipeline.pipeline, words) == truth


def test_a_member_kicked_out_mid_input_does_not_take_the_rejoin_for_idleness(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """SIGSTOP past the session timeout: the group drops the member, which on SIGCONT loses its partitions
    and joins again. With no task left, every task was "at EOF" and `--exit-when-idle` once ended the run
    during the rejoin, with most of the input never read (and, stateful, a lost partition's buffered state
    never saved: the trending tests' rare missing outputs and state keys)."""
    gate = tmp_path / "gate"
    path, pipeline = pipeline_factory({
        "pipeline": "kick",
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}},
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
        "processors": {"gated": {"class": "tests.apps.gated:Gated", "inputs": ["in"], "outputs": ["out"],
                                 "config": {"gate": str(gate)}, "batch_size": 10,
                                 "checkpoint": {"interval": "200ms"}}},
    })
    source, sink = pipeline.processors["gated"].inputs[0], pipeline.processors["gated"].outputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    produce(bootstrap, source, [(f"k{i}", {"i": i}) for i in range(400)])
    gate.touch()  # the first record blocks until the member has been thrown out of the group
    log = tmp_path / "run.log"
    proc = start(path, bootstrap, log, "--exit-when-idle", "1")
    try:
        wait_for_text(log, "assigned")
        time.sleep(0.5)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(6)  # twice the session timeout: the broker has dropped the member
        gate.unlink()
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text()
    assert "lost" in text or "revoking" in text, text[-3000:]  # the member really was thrown out
    seen = {orjson.loads(m.value())["i"] for m in read_raw(bootstrap, sink)}
    assert seen == set(range(400)), f"{400 - len(seen)} records never processed; log: {text[-3000:]}"


def test_exactly_once_instance_takes_partitions_back_without_waiting_on_its_own_transactions(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """Cooperative rebalancing hands an exactly-once instance partitions while it keeps its others, whose open
    transactions hold outputs on the same output partitions. Settling a new partition reads those output
    partitions `read_committed`: the instance commits its own transactions first, or it waits on itself
    until settling gives up (30 s) and the group rebalances again."""
    path, pipeline = pipeline_factory({
        "pipeline": "eo-take-back",
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}},
        "topics": {"words": {"partitions": 2}, "counts": {"partitions": 1}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "checkpoint": {"interval": "20s"},  # the transactions stay open through the hand-overs
        }},
    })
    words, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    sent = [(f"w{i % 20}", {"i": i}) for i in range(400)]
    produce(bootstrap, words, sent)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start(path, bootstrap, log_a, "--instance", "a")
    b = None
    try:
        wait_for_text(log_a, "assigned")
        b = start(path, bootstrap, log_b, "--instance", "b")
        wait_for_text(log_b, "assigned")  # b takes one partition, a keeps the other with its transaction open
        produce(bootstrap, words, sent)  # both have outputs in their open transactions now
        time.sleep(1)
        b.send_signal(signal.SIGTERM)  # b commits and leaves: a is handed b's partition back
        assert b.wait(timeout=60) == 0, log_b.read_text()[-2000:]
        started = time.monotonic()
        wait_for_text(log_a, "assigned", 2, timeout=25)
        took = time.monotonic() - started
    finally:
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, log_a.read_text()[-2000:]
        if b is not None and b.poll() is None:
            b.kill()
    assert "settling could not read its outputs" not in log_a.read_text()
    assert took < 20, took
    outputs = [orjson.loads(m.value()) for m in read_raw(bootstrap, counts)]
    per_word: dict[str, list[int]] = {}
    for out in outputs:
        per_word.setdefault(out["word"], []).append(out["count"])
    assert {w: sorted(c) for w, c in per_word.items()} == {f"w{k}": list(range(1, 41)) for k in range(20)}


def test_local_state_ahead_of_the_group_gets_its_offsets_committed(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """The group's committed offsets fall behind the local state when a commit is refused in a rebalance (the
    state and its offset are already in RocksDB). A restart resumes at the local offset, and must commit it
    even with no new input: the group would otherwise show lag, and another instance would replay, forever."""
    doc = counter_doc()
    doc["processors"]["counter"].update(  # type: ignore[index]
        {"semantics": {"state": "exactly_once", "output": "at_least_once"}, "state": {"dir": str(tmp_path / "s")}})
    path, pipeline = pipeline_factory(doc)
    words = pipeline.processors["counter"].inputs[0]
    produce(bootstrap, words, [(f"w{i % 7}", {"word": f"w{i % 7}"}) for i in range(400)])
    assert run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap).returncode == 0
    group = pipeline.group_id("counter")
    ends = {p: high for p, (_, high) in topic_ends(bootstrap, words, PARTITIONS).items()}
    assert group_offsets(bootstrap, group, words, PARTITIONS) == ends
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its futures are answered
    rewind = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(words, p, 0) for p in range(PARTITIONS)])])
    for future in rewind.values():
        future.result(30)
    assert set(group_offsets(bootstrap, group, words, PARTITIONS).values()) == {0}

    done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap)
    assert done.returncode == 0, done.stdout + done.stderr
    assert group_offsets(bootstrap, group, words, PARTITIONS) == ends, done.stdout[-3000:]
    assert final_state(tmp_path / "s", pipeline.pipeline, words) == Counter({f"w{j}": len(range(j, 400, 7))
                                                                              for j in range(7)})


@pytest.mark.parametrize("pair", FIGURE8_PAIRS, ids="-".join)
def test_an_at_most_once_output_producer_never_resends(bootstrap: str, pipeline_factory: PipelineFactory,
                                                       pair: tuple[str, str]) -> None:
    """A retried produce request can be written twice when the broker has lost the idempotent producer's
    sequence numbers (an unclean restart), and librdkafka sends a batch again after a "not the leader" answer
    whatever its retry count: at-most-once output sends once and asks the leader alone; the other outputs keep
    retries and `acks: all`."""
    doc = counter_doc()
    doc["processors"]["counter"]["semantics"] = dict(zip(("state", "output"), pair, strict=True))  # type: ignore[index]
    path, pipeline = pipeline_factory(doc)
    words = pipeline.processors["counter"].inputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    worker = Worker(pipeline, "counter", bootstrap, exit_when_idle=0.5)
    config = worker.producer_config
    if pair[1] == "at_most_once":
        assert config["message.send.max.retries"] == 0 and config["enable.idempotence"] is False
        assert config["acks"] == 1  # the leader answers once it has written: no "not the leader" after it
    else:
        assert config["enable.idempotence"] is True and "message.send.max.retries" not in config
        assert config["acks"] == "all"
    produce(bootstrap, words, [("a", {"w": "a"}), ("b", {"w": "b"})])
    worker.run()  # librdkafka takes the settings and the outputs get out
    assert worker.processed == 2


@pytest.mark.parametrize("overlap", [False, True])
def test_held_at_most_once_output_outliving_the_group_lease_is_dropped_not_released(
        bootstrap: str, pipeline_factory: PipelineFactory, overlap: bool, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint whose held output would go out after `session.timeout.ms` (a frozen zombie: chaos seed
    72417, windows of a pipeline written twice) drops it: by then the group may have handed the partitions to
    a member that fires the same timers again. Here the checkpoint is slowed after its offsets commit."""
    doc = counter_doc(interval="200ms")
    spec = doc["processors"]["counter"]  # type: ignore[index]
    spec["semantics"] = {"state": "at_most_once", "output": "at_most_once"}
    spec["checkpoint"] = {"interval": "200ms", "overlap": overlap}
    path, pipeline = pipeline_factory(doc)
    words, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    produce(bootstrap, words, [(f"k{i % 7}", {"w": f"w{i % 7}"}) for i in range(300)])
    worker = Worker(pipeline, "counter", bootstrap, exit_when_idle=1.0)
    faults = worker.faults  # the first checkpoint pauses after its offsets step, longer than the lease (3 s)
    faults.pause_point, faults.pause_remaining, faults.pause_seconds = "offsets", 1, 3.5
    with caplog.at_level("WARNING", logger="stylus.runtime.checkpoint"):
        worker.run()
    assert worker.processed == 300
    dropped = [r.getMessage() for r in caplog.records if "held outputs dropped" in r.getMessage()]
    assert len(dropped) == 1 and "session.timeout.ms 3.0s" in dropped[0]
    held = int(dropped[0].split(": ")[1].split(" held")[0])
    out = read_raw(bootstrap, counts)
    assert held > 0 and len(out) == 300 - held  # the dropped ones never go out; the others once each


@pytest.mark.parametrize("state", ["at_most_once", "exactly_once"])
def test_a_revocation_under_held_output_commits_the_kept_partitions_offsets_too(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, state: str) -> None:
    """Held at-most-once output is not kept per partition: the checkpoint of a cooperative revocation releases
    the kept partition's held output too, so it commits the kept partition's offset too. Otherwise, when the
    instance then dies before its next checkpoint, whoever takes the kept partition replays it from its older
    offset and writes the released outputs again (chaos seed 86387)."""
    path, pipeline = pipeline_factory({
        "pipeline": "amo-revoke",
        "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500,
                               "max.partition.fetch.bytes": 2048}},
        "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"counter": {
            # slow: never at the end of its input while a runs, so its output stays held between checkpoints
            "class": "tests.chaos.apps:SlowCounter", "config": {"sleep_ms": 5}, "batch_size": 50,
            "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": state, "output": "at_most_once"},
            "state": {"dir": str(tmp_path / "state")},
            "checkpoint": {"interval": "60s"},  # nothing is released but by the revocation's checkpoint
        }},
    })
    words, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    for start_at in range(0, 2000, 200):  # small batches: the two partitions' records reach a interleaved
        produce(bootstrap, words, [(f"k{i % 10}", {"i": i}) for i in range(start_at, start_at + 200)])
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    port = free_port()
    a = start(path, bootstrap, log_a, "--instance", "a", "--metrics-port", str(port))
    b = None
    try:
        def both_partitions_processed() -> bool:  # their output held, none released
            assert a.poll() is None, log_a.read_text()[-3000:]
            return sum(v > 0 for v in metric(port, "stylus_consumer_position").values()) == 2

        wait_for(both_partitions_processed, 60, "a to process records of both partitions", interval=0.1)
        b = start(path, bootstrap, log_b, "--instance", "b")
        wait_for_text(log_a, "revoking")
        wait_for_text(log_b, "assigned")  # a's revocation, with its checkpoint, is over
        released = {orjson.loads(m.value())["src"].split(":")[1] for m in read_raw(bootstrap, counts)}
        a.kill()  # before a's next checkpoint: the partition it kept is b's after the session timeout
        a.wait(timeout=30)
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=60) == 0, log_b.read_text()[-3000:]
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
    done = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = Counter(orjson.loads(m.value())["src"] for m in read_raw(bootstrap, counts))
    twice = sorted(src for src, n in seen.items() if n > 1)
    assert not twice, (f"{len(twice)} inputs written twice: {twice[:10]}; group offsets "
                       f"{group_offsets(bootstrap, group, words, 2)}\n{log_a.read_text()[-3000:]}")
    revoked = {line.split("revoking ")[1].split("[")[1].rstrip("]") for line in log_a.read_text().splitlines()
               if "revoking " in line}
    assert released - revoked, f"no held output of the partition a kept was released ({released}, {revoked})"


def test_exit_when_idle_waits_for_partitions_held_by_a_member_that_is_gone(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """A member that stops answering (frozen here; after a broker restart, one that lost its partitions and
    exited without leaving) keeps its partitions until its session times out: the sticky assignor leaves them
    with it. A worker run with `--exit-when-idle` that has caught up on its own partitions must wait for those
    too, or it exits 0 with their records unprocessed (chaos seeds 48231, 24315087)."""
    doc = counter_doc(interval="200ms")
    doc["topics"] = {"words": {"partitions": 2}, "counts": {"partitions": 2}}
    doc["processors"]["counter"].update(  # type: ignore[index]
        {"class": "tests.apps.counting:Passthrough", "semantics": {"output": "at_least_once"}})  # no state to lock
    path, pipeline = pipeline_factory(doc)
    words = pipeline.processors["counter"].inputs[0]
    group = pipeline.group_id("counter")
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)

    def everything_committed() -> bool:
        ends = {p: high for p, (_, high) in topic_ends(bootstrap, words, 2).items()}
        return group_offsets(bootstrap, group, words, 2) == ends

    produce(bootstrap, words, [(f"w{i % 10}", {"i": i}) for i in range(100)])
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start(path, bootstrap, log_a, "--instance", "a")
    b = None
    try:
        wait_for(everything_committed, 60, "a to commit every input record",
                 explain=lambda: log_a.read_text()[-3000:])
        b = start(path, bootstrap, log_b, "--instance", "b", "--exit-when-idle", "0.5")
        wait_for_text(log_b, "assigned")  # b has one partition, a the other
        a.send_signal(signal.SIGSTOP)  # a holds its partition, silent, until its session times out (3 s)
        produce(bootstrap, words, [(f"w{i % 10}", {"i": i}) for i in range(100, 200)])  # both partitions
        assert b.wait(timeout=90) == 0, log_b.read_text()[-3000:]
    finally:
        a.send_signal(signal.SIGCONT)
        a.kill()
        a.wait()
        if b is not None and b.poll() is None:
            b.kill()
    assert everything_committed(), (group_offsets(bootstrap, group, words, 2), log_b.read_text()[-3000:])
