"""Duplicate suppression through the real Engine with in-memory stores: window in record time, id header
or key + value hash, the Bloom filter's positives settled exactly, the seen-set saved with the state."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage, StopProcessing
from stylus.core.dedup import record_id
from stylus.state.kv import MemoryKV
from stylus.state.seen import PREFIX, SeenIds
from stylus.state.store import PartitionStore
from tests.apps.counting import Passthrough
from tests.apps.faulty import CountThenFail

MIN = 60_000


def pipeline(dedup: str = "{window: 10m}", cls: str = "tests.apps.counting:Passthrough") -> Pipeline:
    return parse_pipeline(f"""
pipeline: dd
topics: {{in: {{partitions: 2}}, out: {{partitions: 1}}}}
processors:
  p:
    class: {cls}
    inputs: [in]
    outputs: [out]
    semantics: {{state: exactly_once, output: at_least_once}}
    dedup: {dedup}
""")


class Run:
    """One processor instance over partition stores that outlive it (a restart reuses the KVs)."""

    def __init__(self, pipe: Pipeline, kvs: dict[int, MemoryKV] | None = None, processor: Any = None) -> None:
        self.kvs = kvs if kvs is not None else {}
        self.sink = CollectingSink(["out"])
        self.engine = Engine(processor or Passthrough(), "p", pipe.processors["p"], pipe, self.sink, RaiseFailures())
        self.engine.start()
        self.tasks: dict[int, PartitionTask] = {}

    def task_for(self, topic: str, partition: int) -> PartitionTask:
        if partition not in self.tasks:
            kv = self.kvs.setdefault(partition, MemoryKV())
            self.tasks[partition] = PartitionTask(topic, partition, PartitionStore(kv))
        return self.tasks[partition]

    def feed(self, msgs: list[RawMessage]) -> list[Any]:
        before = len(self.sink.outputs)
        self.engine.process_messages(msgs, self.task_for)
        return [o.value for o in self.sink.outputs[before:]]

    def checkpoint(self) -> None:
        for task in self.tasks.values():
            assert task.store is not None
            task.store.save(task.next_offset)

    def seen(self, partition: int = 0) -> SeenIds:
        assert self.engine.dedup is not None
        return self.engine.dedup.seen_ids(self.tasks[partition])


class Feed:
    """Messages with consecutive offsets per partition."""

    def __init__(self) -> None:
        self.offsets: dict[int, int] = {}

    def msg(self, value: Any, ts: int, *, rid: str | None = None, key: str | None = "k", partition: int = 0,
            header: str = "stylus.id") -> RawMessage:
        offset = self.offsets.get(partition, 0)
        self.offsets[partition] = offset + 1
        headers = [(header, rid.encode())] if rid is not None else None
        return RawMessage("in", partition, offset, None if key is None else key.encode(), orjson.dumps(value), ts,
                          headers)


def test_repeat_inside_the_window_is_dropped_and_its_offset_advances() -> None:
    run, f = Run(pipeline()), Feed()
    msgs = [f.msg(1, 0, rid="a"), f.msg(2, 1000, rid="b"), f.msg(3, 9 * MIN, rid="a"), f.msg(4, 9 * MIN, rid="c")]
    assert run.feed(msgs) == [1, 2, 4]
    assert run.engine.process_messages([], run.task_for) == 0
    assert run.tasks[0].next_offset == 4
    assert run.engine.dedup is not None and run.engine.dedup.dropped == 1
    # the handled count includes the dropped repeat; a batch of repeats only still advances the offset
    only_repeats = [f.msg(5, 9 * MIN, rid="b"), f.msg(6, 9 * MIN, rid="c")]
    assert run.engine.process_messages(only_repeats, run.task_for) == 2
    assert run.tasks[0].next_offset == 6 and run.engine.dedup.dropped == 3
    assert not run.sink.outputs[3:]


def test_repeat_outside_the_window_is_kept() -> None:
    run, f = Run(pipeline("{window: 1m}")), Feed()
    out = run.feed([f.msg(1, 0, rid="a"), f.msg(2, MIN + 1, rid="a"),  # 1 ms outside: kept
                    f.msg(3, 2 * MIN, rid="a"),  # within a minute of the kept repeat: dropped
                    f.msg(4, MIN, rid="a")])  # an earlier timestamp, within a minute of both: dropped
    assert out == [1, 2]
    # ids older than (largest timestamp handled - window) are forgotten: a late repeat is kept
    out = run.feed([f.msg(5, 10 * MIN, rid="z"), f.msg(6, 10 * MIN + 1, rid="b"), f.msg(7, 8 * MIN, rid="b")])
    assert out == [5, 6, 7]


def test_partitions_have_their_own_seen_sets() -> None:
    run, f = Run(pipeline()), Feed()
    assert run.feed([f.msg(1, 0, rid="a", partition=0), f.msg(2, 0, rid="a", partition=1),
                     f.msg(3, 0, rid="a", partition=0)]) == [1, 2]


def test_without_the_header_the_id_is_key_plus_value_hash() -> None:
    run, f = Run(pipeline()), Feed()
    out = run.feed([
        f.msg({"v": 1}, 0, key="k"),
        f.msg({"v": 1}, 5, key="k"),  # same key and value: a repeat
        f.msg({"v": 2}, 5, key="k"),  # other value
        f.msg({"v": 1}, 5, key="j"),  # other key
        f.msg({"v": 1}, 5, key=None),  # no key
        f.msg({"v": 1}, 6, key=None),
        f.msg({"v": 1}, 7, key="k", rid="x"),  # an id header wins over key + value
        f.msg({"v": 1}, 8, key="k", rid="y"),
        f.msg({"v": 1}, 9, key="k", rid="x"),
    ])
    assert out == [{"v": 1}, {"v": 2}, {"v": 1}, {"v": 1}, {"v": 1}, {"v": 1}]
    assert record_id(b"ab", b"c", None, None) != record_id(b"a", b"bc", None, None)  # lengths are framed
    assert record_id(None, b"", None, None) != record_id(b"", b"", None, None) != record_id(b"", None, None, None)


def test_header_name_is_configurable() -> None:
    run, f = Run(pipeline("{window: 10m, header: event-id}")), Feed()
    out = run.feed([
        f.msg(1, 0, rid="a", header="event-id"),
        f.msg(2, 0, rid="a", header="event-id"),  # dropped
        f.msg(3, 0, rid="a"),  # `stylus.id` is not the id header here: key + value identify it
        f.msg(3, 0, rid="b"),  # ... so this one is a repeat of the previous one
    ])
    assert out == [1, 3]
    run, f = Run(pipeline("{window: 10m, header: null}")), Feed()  # never a header: always key + value
    assert run.feed([f.msg(1, 0, rid="a"), f.msg(1, 0, rid="b")]) == [1]


def reference(stream: list[tuple[str, int]], window: int) -> list[int]:
    """The documented rule, by brute force: keep record i unless an earlier KEPT record with its id has a
    timestamp t' with |t - t'| <= window and t' >= (largest earlier timestamp) - window."""
    kept: list[int] = []
    high = None
    for i, (rid, ts) in enumerate(stream):
        lo = ts - window if high is None else max(ts, high) - window
        if not any(stream[j][0] == rid and lo <= stream[j][1] <= ts + window for j in kept):
            kept.append(i)
        high = ts if high is None else max(high, ts)
    return kept


@pytest.mark.parametrize("sizing", ["{window: 1m}", "{window: 1m, expected_ids: 1, fp_rate: 0.4}"])
def test_random_stream_matches_the_reference_across_checkpoints_and_restarts(sizing: str) -> None:
    """The second case has a one-word Bloom filter that is saturated almost at once, so nearly every
    record takes the false-positive path to the exact set: the answers must not change."""
    rng = random.Random(11)
    stream, ts = [], 0
    for _ in range(1500):
        ts += rng.randrange(0, 400)
        rid = f"id{rng.randrange(300)}"  # ids repeat at random distances, some far outside the window
        stream.append((rid, max(0, ts - rng.randrange(0, 20_000))))  # out of order by up to 20 s
    pipe = pipeline(sizing)
    kvs: dict[int, MemoryKV] = {}
    run, f = Run(pipe, kvs), Feed()
    kept: list[int] = []
    false_positives = 0
    i = 0
    while i < len(stream):
        n = rng.randrange(1, 120)
        kept += run.feed([f.msg(j, stream[j][1], rid=stream[j][0]) for j in range(i, min(i + n, len(stream)))])
        i += n
        action = rng.random()
        if action < 0.4:
            run.checkpoint()
        elif action < 0.55:  # restart from the last checkpoint: re-feed from the saved offset
            run.checkpoint()
            false_positives += run.seen().false_positives
            run = Run(pipe, kvs)
    false_positives += run.seen().false_positives if run.tasks else 0
    assert kept == reference(stream, MIN)
    assert len(kept) < len(stream) - 200  # plenty of repeats were dropped
    if "expected_ids: 1," in sizing:
        assert false_positives > 200


def test_bloom_positive_for_a_new_id_goes_to_the_exact_set() -> None:
    run, f = Run(pipeline("{window: 10m, expected_ids: 1, fp_rate: 0.4}")), Feed()
    assert run.feed([f.msg(i, 0, rid=f"r{i}") for i in range(200)]) == list(range(200))
    seen = run.seen()
    assert seen.lookups > 150 and seen.false_positives == seen.lookups  # all positives were false ones


def test_restart_rebuilds_the_bloom_filter_from_the_saved_state() -> None:
    pipe = pipeline()
    kvs: dict[int, MemoryKV] = {}
    run, f = Run(pipe, kvs), Feed()
    assert run.feed([f.msg(i, 1000 * i, rid=f"r{i}") for i in range(50)]) == list(range(50))
    run.checkpoint()
    stored = [k for k in kvs[0].data if k.startswith(PREFIX)]
    assert len(stored) == 50
    restarted = Run(pipe, kvs)
    assert restarted.feed([f.msg(100 + i, 1000 * i, rid=f"r{i}") for i in range(0, 50, 5)] +
                          [f.msg(200, 60_000, rid="new")]) == [200]
    seen = restarted.seen()
    assert seen.bloom.count >= 50 and seen.lookups == 10 and seen.false_positives == 0


def test_ids_not_checkpointed_are_forgotten_with_the_state() -> None:
    """The seen-set follows the state: a crash before the checkpoint loses both, and the input replays."""
    pipe = pipeline("{window: 10m}", "tests.apps.faulty:CountThenFail")
    kvs: dict[int, MemoryKV] = {}
    run, f = Run(pipe, kvs, CountThenFail()), Feed()
    run.feed([f.msg({"id": 1}, 0, rid="a")])
    run.checkpoint()
    run.feed([f.msg({"id": 2}, 0, rid="b")])  # not checkpointed
    replay = Run(pipe, kvs, CountThenFail())
    assert len(replay.feed([f.msg({"id": 1}, 0, rid="a"), f.msg({"id": 2}, 0, rid="b")])) == 1
    replay.checkpoint()
    assert orjson.loads(kvs[0].data[b"sk"]) == 2  # counted once each


def test_a_record_that_stops_the_processor_is_not_marked_seen() -> None:
    pipe = pipeline("{window: 10m}", "tests.apps.faulty:CountThenFail")
    run, f = Run(pipe, None, CountThenFail()), Feed()  # RaiseFailures: a failing record stops the run
    with pytest.raises(StopProcessing):
        run.feed([f.msg({"id": 1}, 0, rid="a"), f.msg({"id": 2, "fail": True}, 0, rid="b")])
    run.checkpoint()  # the final checkpoint of `on_error: stop`
    assert run.tasks[0].next_offset == 1
    kv = run.kvs[0]
    again = Run(pipe, {0: kv}, CountThenFail())
    assert len(again.feed([f.msg({"id": 2}, 0, rid="b")])) == 1  # processed again, not dropped as seen


def test_old_buckets_are_deleted_so_the_set_stays_bounded() -> None:
    pipe = pipeline("{window: 1m}")
    kvs: dict[int, MemoryKV] = {}
    run, f = Run(pipe, kvs), Feed()
    per_minute = 600
    for minute in range(10):
        run.feed([f.msg(i, minute * MIN + i * 100, rid=f"m{minute}-{i}") for i in range(per_minute)])
        run.checkpoint()
    stored = [k for k in kvs[0].data if k.startswith(PREFIX)]
    assert per_minute <= len(stored) <= per_minute * 1.25 + 1  # one window plus at most one bucket
    assert run.seen().size == len(stored)


def test_ids_of_a_checkpoint_still_being_written_are_found() -> None:
    """A checkpoint may take the changes now and write them later (another thread): in between, the ids
    it took must still count as seen."""
    pipe = pipeline()
    kvs: dict[int, MemoryKV] = {}
    run, f = Run(pipe, kvs), Feed()
    run.feed([f.msg(1, 0, rid="a")])
    store = run.tasks[0].store
    assert store is not None
    write = store.prepare_save(run.tasks[0].next_offset)
    assert run.feed([f.msg(2, 0, rid="a"), f.msg(3, 0, rid="b")]) == [3]
    write()
    run.checkpoint()
    assert not run.seen().inflight or run.seen().inflight[0][0] > 1
    assert run.feed([f.msg(4, 0, rid="a"), f.msg(5, 0, rid="b")]) == []


def test_dedup_needs_local_state() -> None:
    with pytest.raises(Exception, match="dedup"):
        parse_pipeline("""
pipeline: dd
topics: {in: {}, out: {}}
processors:
  p: {class: "tests.apps.counting:Passthrough", inputs: [in], outputs: [out],
      semantics: {output: at_least_once}, dedup: {window: 10m}}
""")
    with pytest.raises(Exception, match="window"):
        pipeline("{window: 0s}")
    assert Run(pipeline("null")).engine.dedup is None
