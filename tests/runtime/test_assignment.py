"""The worker's partitions after a failed checkpoint (stylus/runtime/assignment.py), on real clients."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from stylus.runtime.worker import Worker
from tests.conftest import PipelineFactory


@pytest.mark.parametrize("state", ["at_most_once", "exactly_once"])
def test_a_failed_checkpoint_drops_the_output_held_since_its_snapshot(
        bootstrap: str, pipeline_factory: PipelineFactory, state: str) -> None:
    """An overlapped checkpoint lets the worker go on processing into held output; when the group then refuses
    its commit, every partition is replayed from its last commit, those records included. Their held output
    goes too, or it would be released beside the replay's (chaos seed 24313788: 444 at-most-once outputs
    written twice)."""
    _, pipeline = pipeline_factory({
        "pipeline": "failed-ckpt",
        "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"counter": {"class": "tests.apps.counting:WordCount", "inputs": ["words"],
                                   "outputs": ["counts"], "semantics": {"state": state, "output": "at_most_once"}}},
    })
    out = pipeline.processors["counter"].outputs[0]
    worker = Worker(pipeline, "counter", bootstrap)
    try:
        for i in range(3):  # outputs of records processed after the failed checkpoint's snapshot
            worker.sink(out, f"k{i}", {"word": f"k{i}", "count": 1}, 0, None)
        assert worker.sink.held_count == 3
        worker.assignment.checkpoint_failed(KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS)),
                                            fenced=False)
        assert worker.sink.held_count == 0
        assert worker.assignment.rejoin
    finally:
        worker.consumer.close()
