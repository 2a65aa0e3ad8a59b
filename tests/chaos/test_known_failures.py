"""Known exactly-once failures (issue "Exactly-once made simple"), each reproduced as closely as possible to its
report and asserting the promise, so each fails while its bug exists:

1. a SIGKILL of an exactly-once processor with timers (per-key tumbling sums written with `set_timer`);
2. losing the machine: SIGKILL, state directory deleted, restart from the state backup;
3. partitions moving to another machine with no backup: the new owner must rebuild the partitions' state from
   the retained input (output suppressed), or, when retention deleted the start of the input, refuse to start
   with a message naming the partition and the missing restore source; and (a variant the chaos matrix led to)
   a rebuilt partition of a timer processor must not fire its old owner's timers again.

Each test SIGKILLs real `stylus run` processes (tests/support/chaos.py) while the input arrives at a steady rate.
"""

from __future__ import annotations

import random
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from stylus.config.model import Pipeline
from stylus.kafka.reader import read_topic
from tests.conftest import PipelineFactory
from tests.runtime.crash_harness import blocked_tail
from tests.support.chaos import (
    Feeder,
    Instance,
    Rec,
    all_committed,
    group_offsets,
    produce_now,
    store_states,
    topic_ends,
    wait_until,
)
from tests.support.kafka import read_json

BASE_TS = 1_700_000_000_000 - 1_700_000_000_000 % 10_000
FAR_FUTURE = BASE_TS + 10**9
FAST_GROUP = {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}}  # a killed member leaves soon


def _committed_json(bootstrap: str, topic: str, *logs: Instance) -> list[dict[str, Any]]:
    """The output a read_committed reader sees; when an open transaction blocks it, say whose."""
    try:
        return read_json(bootstrap, topic, timeout=60)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{blocked_tail(bootstrap, topic)}\n"
                             + "\n".join(i.tail() for i in logs)) from exc


def _close_every_window(bootstrap: str, events: str, partitions: int) -> None:
    """A far-future record on every partition: the watermark passes every window, so all of them close."""
    produce_now(bootstrap, events, [Rec("zz", {"k": "zz", "ts": FAR_FUTURE, "amount": 0, "i": -1}, FAR_FUTURE, p)
                                    for p in range(partitions)])


def _output_count(bootstrap: str, topic: str, partitions: int) -> int:
    return sum(high for _, high in topic_ends(bootstrap, topic, partitions).values())


# ----------------------------------------------------------------------------------------------------------------
# 1. a crash of a processor with timers

TIMER_RECORDS = 30_000
TIMER_KEYS = 20
TIMER_RATE = 1500  # records/s: the input takes ~20 s to arrive


def _disordered_records(seed: int, count: int, keys: int, disorder_ms: int) -> list[Rec]:
    """`count` records 10 ms of event time apart (300 s for 30,000), sent in the order of event time plus up to
    `disorder_ms` of noise: each record is at most `disorder_ms` behind the newest one sent before it."""
    rng = random.Random(seed)
    values: list[dict[str, Any]] = [{"k": f"k{rng.randrange(keys)}", "ts": BASE_TS + i * 10 + rng.randrange(10),
                                     "amount": rng.randint(1, 9), "i": i} for i in range(count)]
    order = sorted(values, key=lambda v: v["ts"] + rng.uniform(0, disorder_ms))
    return [Rec(str(v["k"]), v, int(v["ts"])) for v in order]


def _kill_and_replace(first: Instance, second: Instance, feeder: Feeder, killed_when: Callable[[], bool], what: str,
                      *, lost: Callable[[], None] = lambda: None, finish: Callable[[], None] = lambda: None) -> None:
    """`first` runs while the feeder's input arrives; once `killed_when()` holds it is SIGKILLed, `lost()` runs (the
    machine's loss: its state deleted), and `second` takes over until idle, `finish()` run once all the input is
    sent. Both must have done their part: `second` exits cleanly, and the kill came mid-input."""
    first.start()
    try:
        wait_until(lambda: first.says("assigned") or not first.alive, 60, "the first instance to be assigned",
                   explain=first.tail)
        feeder.start()
        wait_until(killed_when, 60, what, interval=0.3, explain=first.tail)
        assert first.alive, first.tail()
        first.kill()
        sent_at_kill = feeder.sent
        lost()
        second.start(exit_when_idle=3)
        feeder.join_checked(60)
        finish()
        code = second.wait(180)
    finally:
        feeder.stop_flag.set()
        first.kill()
        second.kill()
    assert code == 0, second.tail()
    assert 0 < sent_at_kill < len(feeder.records)


def _timer_pipeline(pipeline_factory: PipelineFactory, state_dir: Path, *, partitions: int,
                    interval: str) -> tuple[Path, Pipeline]:
    """Per-key tumbling sums written with `set_timer`, exactly-once state and output."""
    return pipeline_factory({
        "kafka": FAST_GROUP,
        "topics": {"events": {"partitions": partitions}, "sums": {"partitions": 2}},
        "processors": {"win": {
            "class": "tests.chaos.apps:TimerWindowSum", "inputs": ["events"], "outputs": ["sums"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "event_time": {"field": "ts", "allowed_lateness": "5s"},
            "checkpoint": {"interval": interval},
            "state": {"dir": str(state_dir)},
        }}})


def _windows_across_a_kill(bootstrap: str, pipeline: Pipeline, first: Instance, second: Instance,
                           records: list[Rec], killed_when: Callable[[Feeder], bool], what: str) -> None:
    """`first` runs the timer windows while `records` arrive; once `killed_when(feeder)` holds it is SIGKILLed and
    `second` finishes the input, every window closed, until idle. Every window must then be emitted once, with
    its exact sum, in the committed output."""
    spec = pipeline.processors["win"]
    events, sums = spec.inputs[0], spec.outputs[0]
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for rec in records:
        expected[(rec.value["k"], rec.ts - rec.ts % 10_000)] += rec.value["amount"]
    feeder = Feeder(bootstrap, events, records, TIMER_RATE)
    _kill_and_replace(first, second, feeder, lambda: killed_when(feeder), what,
                      finish=lambda: _close_every_window(bootstrap, events, pipeline.topics[events].partitions))
    results = [r for r in _committed_json(bootstrap, sums, second) if r["key"] != "zz"]
    _assert_each_window_once_and_exact(results, expected, second.tail(6000))


def test_sigkill_of_an_exactly_once_processor_with_timers_emits_every_window_once_and_exact(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path, pipeline = _timer_pipeline(pipeline_factory, tmp_path / "state", partitions=3, interval="1s")
    sums = pipeline.processors["win"].outputs[0]
    first = Instance(path, tmp_path / "win.log", bootstrap, name="win", processors=["win"])
    restarted = Instance(path, tmp_path / "win.log", bootstrap, name="win-restarted", processors=["win"])
    # killed mid-stream, about 9 s into the input: windows have been emitted, most of the input is still to come
    _windows_across_a_kill(
        bootstrap, pipeline, first, restarted,
        _disordered_records(seed=31, count=TIMER_RECORDS, keys=TIMER_KEYS, disorder_ms=2000),
        lambda feeder: feeder.sent >= TIMER_RATE * 9 and _output_count(bootstrap, sums, 2) > 0,
        "windows emitted 9 s into the input")


def _assert_each_window_once_and_exact(results: list[dict[str, Any]], expected: dict[tuple[str, int], int],
                                       tail: str) -> None:
    seen = Counter((r["key"], r["start"]) for r in results)
    duplicated = sorted(k for k, n in seen.items() if n > 1)
    got = {(r["key"], r["start"]): r["sum"] for r in results}
    missing = sorted(set(expected) - set(got))
    wrong = sorted(k for k in expected.keys() & got.keys() if got[k] != expected[k])
    extra = sorted(set(got) - set(expected))
    assert not (duplicated or missing or wrong or extra), (
        f"{len(expected)} windows expected, {len(results)} results: {len(duplicated)} emitted more than once "
        f"{duplicated[:5]}, {len(missing)} missing {missing[:5]}, {len(wrong)} with a wrong sum "
        f"{[(k, got[k], expected[k]) for k in wrong[:5]]}, {len(extra)} unexpected {extra[:5]}\n{tail}")


# ----------------------------------------------------------------------------------------------------------------
# counters shared by 2 and 3: 10 keys, 2 partitions, exactly-once state and output

COUNTER_KEYS = [f"w{i}" for i in range(10)]


def _counter_records(count: int, *, first: int = 0, ts: int | None = None, seed: int = 5) -> list[Rec]:
    rng = random.Random(seed + first)
    return [Rec(key, {"k": key, "i": i}, BASE_TS + i if ts is None else ts)
            for i in range(first, first + count) for key in [rng.choice(COUNTER_KEYS)]]


def _counter_doc(state_dir: Path, *, backup: dict[str, Any] | None = None, changelog: bool = False,
                 input_config: dict[str, str] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"dir": str(state_dir)}
    if backup is not None:
        state["backup"] = backup
    if changelog:
        state["changelog"] = True
    events: dict[str, Any] = {"partitions": 2}
    if input_config:
        events["config"] = input_config
    return {
        "kafka": FAST_GROUP,
        "topics": {"events": events, "counts": {"partitions": 2}},
        "processors": {"counter": {
            "class": "tests.chaos.apps:KeyCounter", "inputs": ["events"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "exactly_once"},
            "checkpoint": {"interval": "500ms"}, "state": state,
        }}}


def _merged(states: dict[int, dict[str, Any]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for state in states.values():
        total.update({k: int(v) for k, v in state.items()})
    return dict(total)


def _output_violations(outputs: list[dict[str, Any]], truth: Counter[str]) -> list[str]:
    """Exactly-once counter output: per key the counts 1..n, each once."""
    per_key: dict[str, list[int]] = defaultdict(list)
    for out in outputs:
        per_key[out["key"]].append(out["count"])
    bad = []
    for key in sorted(truth.keys() | per_key.keys()):
        counts = Counter(per_key.get(key, []))
        dups = sorted(c for c, n in counts.items() if n > 1)
        missing = sorted(set(range(1, truth[key] + 1)) - set(counts))
        extra = sorted(c for c in counts if not 1 <= c <= truth[key])
        if dups or missing or extra:
            bad.append(f"{key}: {len(dups)} counts emitted twice {dups[:3]}, {len(missing)} missing {missing[:3]}, "
                       f"{len(extra)} beyond the truth {truth[key]} {extra[:3]}")
    return bad


# ----------------------------------------------------------------------------------------------------------------
# 2. losing the machine

@pytest.mark.parametrize("source", ["backup", "changelog"])
def test_machine_loss_restores_the_state_and_state_and_output_stay_exact(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, source: str) -> None:
    """The state comes back from a backup (then the input since it is replayed with output suppressed) or
    from the changelog (exact as it is: nothing to replay)."""
    state_dir = tmp_path / "state"
    backup = {"uri": f"file://{tmp_path / 'backups'}", "interval": "2s"}
    path, pipeline = pipeline_factory(_counter_doc(
        state_dir, backup=backup if source == "backup" else None, changelog=source == "changelog"))
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    records = _counter_records(30_000)
    truth = Counter(rec.key for rec in records if rec.key is not None)
    rate = 1500  # 20 s of input

    first = Instance(path, tmp_path / "counter.log", bootstrap, name="counter")
    restarted = Instance(path, tmp_path / "counter.log", bootstrap, name="counter-new-machine")
    feeder = Feeder(bootstrap, events, records, rate)
    # about 12 s in, with backups of both partitions made: then the machine is gone
    backed_up = (lambda: first.log_text().count("backed up") >= 2) if source == "backup" else (lambda: True)
    _kill_and_replace(first, restarted, feeder, lambda: feeder.sent >= rate * 12 and backed_up(),
                      "12 s of input and backups", lost=lambda: shutil.rmtree(state_dir))
    assert restarted.says("restored"), restarted.tail()  # the state came from the backup or the changelog
    if source == "changelog":  # at the committed offset already: nothing replayed
        assert restarted.says(".changelog: ") and not restarted.says("replayed"), restarted.tail()

    store_dir = state_dir / pipeline.pipeline / "counter"
    state = _merged(store_states(store_dir))
    wrong = {k: (state.get(k), truth.get(k)) for k in truth.keys() | state.keys() if state.get(k) != truth.get(k)}
    output_bad = _output_violations(_committed_json(bootstrap, counts, restarted), truth)
    assert not wrong and not output_bad, (f"state per key (state, truth) wrong: {wrong}\noutput: {output_bad}\n"
                                          f"{restarted.tail(6000)}")


# ----------------------------------------------------------------------------------------------------------------
# 3. partitions moving to another machine (no backup)

def _two_machines(path_a: Path, tmp_path: Path) -> Path:
    """B's pipeline file: the same pipeline with its own (empty) state directory."""
    doc = yaml.safe_load(path_a.read_text())
    doc["processors"]["counter"]["state"]["dir"] = str(tmp_path / "state-b")
    path_b = tmp_path / "b.yaml"
    path_b.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path_b


def test_partitions_moved_to_a_machine_without_their_state_rebuild_it_from_the_retained_input(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    path_a, pipeline = pipeline_factory(_counter_doc(tmp_path / "state-a"))
    path_b = _two_machines(path_a, tmp_path)
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    records = _counter_records(20_000)
    truth = Counter(rec.key for rec in records if rec.key is not None)
    rate = 1500

    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a")
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")  # another machine: an empty state, no backup
    feeder = Feeder(bootstrap, events, records, rate)
    # A alone for a while: both partitions committed well past their start
    _kill_and_replace(a, b, feeder, lambda: feeder.sent >= rate * 5 and all(
        o > 1000 for o in group_offsets(bootstrap, group, events, 2).values()), "A to commit progress")
    assert all_committed(bootstrap, group, events, 2)

    state_b = _merged(store_states(tmp_path / "state-b" / pipeline.pipeline / "counter"))
    wrong = {k: (state_b.get(k), truth.get(k)) for k in truth.keys() | state_b.keys()
             if state_b.get(k) != truth.get(k)}
    assert not wrong, f"B's state per key (state, truth) is not exact: {wrong}\n{b.tail(6000)}"
    output_bad = _output_violations(_committed_json(bootstrap, counts, b), truth)
    assert not output_bad, output_bad


def _set_retention(bootstrap: str, topic: str, retention_ms: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_partitions_moved_to_a_machine_without_their_state_and_input_refuse_to_start(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """As above, but retention has deleted the start of the input: the state cannot be rebuilt, so B must refuse
    to start, naming the partition and the missing restore source, and write no output."""
    # a segment per minute of record time: the old records below fill one segment per 100 records
    path_a, pipeline = pipeline_factory(_counter_doc(tmp_path / "state-a", input_config={"segment.ms": "60000"}))
    path_b = _two_machines(path_a, tmp_path)
    events, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    group = pipeline.group_id("counter")
    # 2,000 records a minute of record time apart every 100 (2023: long past any retention), then 6,000 of today
    old = [Rec(r.key, r.value, BASE_TS + (r.value["i"] // 100) * 60_000) for r in _counter_records(2000)]
    now_ms = int(time.time() * 1000)
    new = [Rec(r.key, r.value, now_ms) for r in _counter_records(6000, first=2000)]
    produce_now(bootstrap, events, old)

    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a")
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")
    feeder = Feeder(bootstrap, events, new, 1000)
    a.start()
    try:
        wait_until(lambda: a.says("assigned") or not a.alive, 60, "A to be assigned", explain=a.tail)
        feeder.start()
        wait_until(lambda: feeder.sent >= 2000 and all(
            o > 1000 for o in group_offsets(bootstrap, group, events, 2).values()), 60, "A to commit past the old "
            "records", interval=0.3, explain=a.tail)
        a.kill()
        feeder.join_checked(60)
        # retention now deletes the old records' segments: the input no longer holds the start of either partition
        _set_retention(bootstrap, events, 60_000)
        wait_until(lambda: all(low > 0 for low, _ in topic_ends(bootstrap, events, 2).values()), 60,
                   "retention to delete the first segments", interval=0.3)
        gone = {p: low for p, (low, _) in topic_ends(bootstrap, events, 2).items()}
        committed = group_offsets(bootstrap, group, events, 2)
        assert all(committed[p] > 0 and gone[p] > 0 for p in gone), (committed, gone)  # A's state is gone with it
        outputs_before = len(read_topic(bootstrap, counts))
        b.start(exit_when_idle=3)
        code = b.wait(120)
    finally:
        feeder.stop_flag.set()
        a.kill()
        b.kill()
    log = b.log_text()
    assert code != 0, f"B started without the state of the partitions and no way to rebuild it:\n{b.tail()}"
    named = [p for p in gone if f"{events}[{p}]" in log]
    assert named, f"the refusal names no partition of {events}:\n{b.tail()}"
    assert re.search(r"backup", log, re.I) and re.search(r"retention|deleted|no longer", log, re.I), b.tail()
    assert len(read_topic(bootstrap, counts)) == outputs_before, "B wrote output although it refused to start"


def test_partitions_of_a_timer_processor_moved_without_their_state_emit_each_window_once(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path) -> None:
    """Test 3 with the timer windows of test 1: B rebuilds the moved partitions' state from the retained input
    (output suppressed); the windows A already emitted must not be emitted again from the rebuilt state."""
    path_a, pipeline = _timer_pipeline(pipeline_factory, tmp_path / "state-a", partitions=2, interval="500ms")
    doc = yaml.safe_load(path_a.read_text())
    doc["processors"]["win"]["state"]["dir"] = str(tmp_path / "state-b")
    path_b = tmp_path / "b.yaml"
    path_b.write_text(yaml.safe_dump(doc, sort_keys=False))
    events, sums = pipeline.processors["win"].inputs[0], pipeline.processors["win"].outputs[0]
    group = pipeline.group_id("win")
    a = Instance(path_a, tmp_path / "a.log", bootstrap, name="a")
    b = Instance(path_b, tmp_path / "b.log", bootstrap, name="b")  # another machine, no backup
    _windows_across_a_kill(
        bootstrap, pipeline, a, b, _disordered_records(seed=32, count=12_000, keys=TIMER_KEYS, disorder_ms=2000),
        lambda feeder: feeder.sent >= TIMER_RATE * 4 and _output_count(bootstrap, sums, 2) > 0 and all(
            o > 1000 for o in group_offsets(bootstrap, group, events, 2).values()),
        "A to emit windows and commit progress")
