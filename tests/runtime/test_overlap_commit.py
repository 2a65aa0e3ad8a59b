"""Overlapped at-most-once checkpoints send their offsets commit without waiting for it; the background
waits for the answer, and the worker commits itself whenever it must wait (stylus/runtime/checkpoint.py).
Against the real broker: many small overlapped checkpoints, and held output past the limit so the worker
waits for checkpoints in flight, must end with every record emitted once, the group's offsets at the
end, and no stall on an answer that could only arrive through the waiting worker's own consume()."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from stylus import Context, Processor, Record
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.kafka.offsets import end_offsets
from stylus.runtime import worker as worker_module
from stylus.runtime.worker import Worker
from tests.support.kafka import produce, read_json
from tests.support.threads import start_thread

RECORDS = 3000
PARTITIONS = 2


class Echo(Processor):
    def process(self, record: Record, ctx: Context) -> None:
        ctx.emit({"src": f"{record.partition}:{record.offset}"}, key=record.key)


def echo_pipeline(bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, name: str, batch_size: int,
                  semantics: dict[str, str], checkpoint: dict[str, Any]) -> tuple[Pipeline, str, str]:
    """`Echo` from a new input topic holding RECORDS records to a new output topic: (pipeline, input, output)."""
    topic_in, topic_out = topic_factory(f"{name}-in", PARTITIONS), topic_factory(f"{name}-out", PARTITIONS)
    pipeline = parse_pipeline(json.dumps({
        "pipeline": name, "kafka": {"bootstrap.servers": bootstrap},
        "topics": {topic_in: {"partitions": PARTITIONS}, topic_out: {"partitions": PARTITIONS}},
        "processors": {"p": {"class": "tests.runtime.test_overlap_commit:Echo", "inputs": [topic_in],
                             "outputs": [topic_out], "batch_size": batch_size, "semantics": semantics,
                             "checkpoint": checkpoint, "state": {"dir": str(tmp_path / "state")}}},
    }))
    produce(bootstrap, topic_in, [(f"k{i % 7}", {"i": i}) for i in range(RECORDS)])
    return pipeline, topic_in, topic_out


@pytest.mark.parametrize("state", ["at_most_once", "exactly_once"])
def test_overlapped_commit_is_settled_without_waiting_on_itself(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        state: str) -> None:
    # the worker often waits for the checkpoint (at-most-once output's own limit is AT_MOST_ONCE_BATCH)
    monkeypatch.setattr(worker_module, "MAX_HELD_OUTPUT", 40)
    monkeypatch.setattr(worker_module, "AT_MOST_ONCE_BATCH", 40)
    pipeline, topic_in, topic_out = echo_pipeline(
        bootstrap, topic_factory, tmp_path, f"ovl-{state}", 25, {"state": state, "output": "at_most_once"},
        {"interval": "5ms", "overlap": True})
    worker = Worker(pipeline, "p", bootstrap, exit_when_idle=1.0)
    started = time.monotonic()
    thread, errors = start_thread(worker.run)
    thread.join(120)
    assert not thread.is_alive(), "the worker stalled"
    assert not errors, errors
    assert time.monotonic() - started < 60  # an unanswered commit would have held a checkpoint for 60 s
    assert worker.checkpoints > 20
    sources = [doc["src"] for doc in read_json(bootstrap, topic_out)]
    assert len(sources) == len(set(sources)) == RECORDS  # no crash: every record's output exactly once
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": pipeline.group_id("p")})
    try:
        committed = consumer.committed([TopicPartition(topic_in, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    ends = end_offsets(bootstrap, [(topic_in, p) for p in range(PARTITIONS)])
    assert {(tp.topic, tp.partition): tp.offset for tp in committed} == {tp: high for tp, (_, high) in ends.items()}


@pytest.mark.parametrize(("output", "batch", "early"), [
    ("at_most_once", 100, True), ("at_most_once", None, False), ("at_least_once", 100, False)])
def test_held_at_most_once_output_is_released_by_batch_and_at_the_end(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        output: str, batch: int | None, early: bool) -> None:
    """At-most-once output waits in memory for its checkpoint: once AT_MOST_ONCE_BATCH records are held the
    worker takes one without waiting for the interval (an hour here), and waits for it before holding more;
    once every partition is at its end, the rest is released at once (so an idle worker can stop). Output
    not held until the checkpoint (at-least-once) is no reason to checkpoint."""
    if batch is not None:
        monkeypatch.setattr(worker_module, "AT_MOST_ONCE_BATCH", batch)
    pipeline, _, topic_out = echo_pipeline(
        bootstrap, topic_factory, tmp_path, f"amo-{output}", 50, {"state": "exactly_once", "output": output},
        {"interval": "1h"})
    stop = threading.Event()
    worker = Worker(pipeline, "p", bootstrap, stop=stop, exit_when_idle=1.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(60)
    stopped_by_itself = not thread.is_alive()
    stop.set()  # held output keeps a worker from ever being idle
    thread.join(30)
    assert stopped_by_itself, "the worker held its output until told to stop"
    sources = [doc["src"] for doc in read_json(bootstrap, topic_out)]
    assert len(sources) == len(set(sources)) == RECORDS
    if early:  # ~one per 100 records: the worker waits for each before holding past the batch
        assert worker.checkpoints >= RECORDS // 300
    else:  # released when the input ran out (at-most-once), or only by the final checkpoint
        assert worker.checkpoints <= 3
