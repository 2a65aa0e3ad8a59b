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

import pytest
from confluent_kafka import Consumer, TopicPartition

from stylus import Context, Processor, Record
from stylus.config import parse_pipeline
from stylus.kafka.offsets import end_offsets
from stylus.runtime import worker as worker_module
from stylus.runtime.worker import Worker
from tests.support.kafka import produce, read_json

RECORDS = 3000
PARTITIONS = 2


class Echo(Processor):
    def process(self, record: Record, ctx: Context) -> None:
        ctx.emit({"src": f"{record.partition}:{record.offset}"}, key=record.key)


@pytest.mark.parametrize("state", ["at_most_once", "exactly_once"])
def test_overlapped_commit_is_settled_without_waiting_on_itself(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        state: str) -> None:
    monkeypatch.setattr(worker_module, "MAX_HELD_OUTPUT", 40)  # the worker often waits for the checkpoint
    topic_in, topic_out = topic_factory("ovl-in", PARTITIONS), topic_factory("ovl-out", PARTITIONS)
    pipeline = parse_pipeline(json.dumps({
        "pipeline": f"ovl-{state}", "kafka": {"bootstrap.servers": bootstrap},
        "topics": {topic_in: {"partitions": PARTITIONS}, topic_out: {"partitions": PARTITIONS}},
        "processors": {"p": {"class": "tests.runtime.test_overlap_commit:Echo", "inputs": [topic_in],
                             "outputs": [topic_out], "batch_size": 25,
                             "semantics": {"state": state, "output": "at_most_once"},
                             "checkpoint": {"interval": "5ms", "overlap": True},
                             "state": {"dir": str(tmp_path / "state")}}},
    }))
    produce(bootstrap, topic_in, [(f"k{i % 7}", {"i": i}) for i in range(RECORDS)])
    worker = Worker(pipeline, "p", bootstrap, exit_when_idle=1.0)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
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
