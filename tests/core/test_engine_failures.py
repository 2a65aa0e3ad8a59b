"""A failing record or timer is atomic: its state writes and emits are undone before the failure policy runs."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.core import CollectingSink, Engine, PartitionTask, RawMessage, StopProcessing
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.apps.faulty import CountThenFail, TimerFail

DOC = """
pipeline: atom
topics: {{in: {{partitions: 1}}, out: {{partitions: 1}}}}
processors:
  p:
    class: tests.apps.faulty:{cls}
    inputs: [in]
    outputs: [out]
    semantics: {{state: exactly_once, output: at_least_once}}
"""


class Recorder:
    """A failure handler that remembers each call and, for `stop`, raises like FailurePolicy does."""

    def __init__(self, stop: bool = False) -> None:
        self.calls: list[tuple[Any, str, str]] = []
        self.stop = stop

    def __call__(self, msg: Any, exc: BaseException, stage: str, task: PartitionTask) -> None:
        self.calls.append((msg, stage, str(exc)))
        if self.stop:
            raise StopProcessing(str(exc), msg.offset()) from exc


def _setup(cls: str, stop: bool = False) -> tuple[Pipeline, Engine, CollectingSink, Recorder, PartitionTask]:
    pipeline = parse_pipeline(DOC.format(cls=cls))
    sink = CollectingSink(["out"])
    failures = Recorder(stop)
    processor = CountThenFail() if cls == "CountThenFail" else TimerFail()
    engine = Engine(processor, "p", pipeline.processors["p"], pipeline, sink, failures)
    engine.start()
    task = PartitionTask("in", 0, PartitionStore(MemoryKV()))
    return pipeline, engine, sink, failures, task


def _msgs(values: list[dict[str, Any]], key: str = "k") -> list[RawMessage]:
    return [RawMessage("in", 0, i, key.encode(), orjson.dumps(v), 1000 + i) for i, v in enumerate(values)]


def test_failing_record_leaves_no_state_and_no_output() -> None:
    _, engine, sink, failures, task = _setup("CountThenFail")
    values = [{"id": 0}, {"id": 1, "fail": True}, {"id": 2}]
    engine.process_messages(_msgs(values), lambda t, p: task)
    assert [o.value["id"] for o in sink.outputs] == [0, 2]
    assert [o.value["n"] for o in sink.outputs] == [1, 2]  # the failed record's count was undone
    assert task.state is not None and task.state["k"] == 2 and task.state["__total__"] == 2
    assert [(m.offset(), stage) for m, stage, _ in failures.calls] == [(1, "process")]
    assert task.next_offset == 3  # dead-lettered/skipped records count as processed


def test_rollback_restores_values_written_earlier_in_the_same_checkpoint() -> None:
    _, engine, _, _, task = _setup("CountThenFail")
    engine.process_messages(_msgs([{"id": 0}, {"id": 1}]), lambda t, p: task)
    assert task.state is not None
    task.state["other"] = "x"  # dirty, not yet saved
    msgs = [RawMessage("in", 0, 2, b"k", orjson.dumps({"id": 2, "fail": True}), 5)]
    engine.process_messages(msgs, lambda t, p: task)
    assert task.state["k"] == 2 and task.state["other"] == "x"
    assert task.store is not None
    task.store.save(task.next_offset)
    reopened = PartitionStore(task.store.kv)
    assert reopened.state["k"] == 2 and reopened.state["__total__"] == 2 and reopened.stored_offset() == 3


def test_a_new_key_written_by_a_failing_record_disappears() -> None:
    _, engine, _, _, task = _setup("CountThenFail")
    engine.process_messages(_msgs([{"id": 0, "fail": True}], key="fresh"), lambda t, p: task)
    assert task.state is not None and "fresh" not in task.state and "__total__" not in task.state
    assert task.store is not None and task.store.state_changes() == {}


def test_stop_raises_before_counting_the_failing_record() -> None:
    _, engine, sink, _, task = _setup("CountThenFail", stop=True)
    with pytest.raises(StopProcessing):
        engine.process_messages(_msgs([{"id": 0}, {"id": 1, "fail": True}, {"id": 2}]), lambda t, p: task)
    assert task.next_offset == 1  # the final checkpoint stops right before the failing record
    assert [o.value["id"] for o in sink.outputs] == [0]
    assert task.state is not None and task.state["k"] == 1


def test_undecodable_record_goes_to_the_policy_with_stage_decode() -> None:
    _, engine, sink, failures, task = _setup("CountThenFail")
    msgs = [RawMessage("in", 0, 0, b"k", b"{not json", 1), RawMessage("in", 0, 1, b"k", b'{"id": 1}', 2)]
    engine.process_messages(msgs, lambda t, p: task)
    assert [(m.value(), stage) for m, stage, _ in failures.calls] == [(b"{not json", "decode")]
    assert [o.value["id"] for o in sink.outputs] == [1]


def test_failing_timer_is_atomic_and_reported_with_stage_timer() -> None:
    _, engine, sink, failures, task = _setup("TimerFail")
    msgs = [RawMessage("in", 0, i, k.encode(), orjson.dumps({"ts": 100 + i}), 1) for i, k in
            enumerate(["a", "bad1", "b"])]
    engine.process_messages(msgs, lambda t, p: task)
    engine.fire_timers([task], 1000)
    assert [o.value["timer"] for o in sink.outputs] == ["a", "b"]
    assert task.state is not None and task.state["fired"] == 2
    [(msg, stage, error)] = failures.calls
    assert stage == "timer" and "bad1" in error
    assert msg.offset() == -1 and orjson.loads(msg.value()) == {"timer": "bad1", "timestamp": 101}


def test_a_failing_record_takes_out_the_timers_it_added_and_only_those() -> None:
    _, engine, sink, failures, task = _setup("TimerFail")
    values = [("a", {"ts": 100}), ("x", {"ts": 150, "fail": True}), ("a", {"ts": 100, "fail": True}),
              ("a", {"ts": 120, "fail": True})]
    msgs = [RawMessage("in", 0, i, k.encode(), orjson.dumps(v), 1) for i, (k, v) in enumerate(values)]
    engine.process_messages(msgs, lambda t, p: task)
    assert [m.offset() for m, _, _ in failures.calls] == [1, 2, 3]
    assert task.store is not None and len(task.store.timers) == 1  # (100, a) was set before the failures
    engine.fire_timers([task], 1000)
    assert [(o.value["timer"], o.value["ts"]) for o in sink.outputs] == [("a", 100)]


def test_stop_in_a_timer_keeps_it_and_the_later_ones_for_the_next_run() -> None:
    _, engine, sink, _, task = _setup("TimerFail", stop=True)
    msgs = [RawMessage("in", 0, i, k.encode(), orjson.dumps({"ts": 100 + i}), 1) for i, k in
            enumerate(["a", "bad1", "b"])]
    engine.process_messages(msgs, lambda t, p: task)
    with pytest.raises(StopProcessing):
        engine.fire_timers([task], 1000)
    assert [o.value["timer"] for o in sink.outputs] == ["a"]
    assert task.store is not None
    task.store.save(task.next_offset)
    reopened = PartitionStore(task.store.kv)
    assert reopened.timers.pop_due(1000) == [(101, "bad1"), (102, "b")]
    assert reopened.state["fired"] == 1


def test_records_given_as_columns_are_processed_as_the_same_messages() -> None:
    values = [{"id": 0}, {"id": 1, "fail": True}, {"id": 2}]
    _, by_messages, sink_m, failures_m, task_m = _setup("CountThenFail")
    by_messages.process_messages(_msgs(values), lambda t, p: task_m)
    _, by_columns, sink_c, failures_c, task_c = _setup("CountThenFail")
    raw = [orjson.dumps(v) for v in values]
    assert by_columns.process_columns("in", 0, range(3), [b"k"] * 3, raw, [1000, 1001, 1002], [None] * 3,
                                      lambda t, p: task_c) == 3
    assert [(o.key, o.value, o.timestamp) for o in sink_c.outputs] == \
        [(o.key, o.value, o.timestamp) for o in sink_m.outputs] and len(sink_c.outputs) == 2
    assert [(m.offset(), stage) for m, stage, _ in failures_c.calls] == \
        [(m.offset(), stage) for m, stage, _ in failures_m.calls] == [(1, "process")]
    assert task_c.state is not None and task_m.state is not None
    assert task_c.next_offset == task_m.next_offset == 3
    assert dict(task_c.state.items()) == dict(task_m.state.items()) == {"k": 2, "__total__": 2}
