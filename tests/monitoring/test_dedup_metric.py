"""`stylus_duplicates_dropped_total`: the collector reads the worker's dedup counter at scrape time."""

from __future__ import annotations

import orjson

from stylus.core import PartitionTask, RawMessage
from stylus.monitoring.metrics import StylusCollector
from stylus.runtime.worker import Worker
from stylus.state.kv import MemoryKV
from stylus.state.store import PartitionStore
from tests.conftest import PipelineFactory


def test_duplicates_dropped_metric(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    _, pipeline = pipeline_factory({
        "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
        "processors": {
            "counter": {"class": "tests.apps.counting:WordCount", "inputs": ["in"], "outputs": ["out"],
                        "semantics": {"state": "exactly_once", "output": "at_least_once"},
                        "dedup": {"window": "1m"}},
            "plain": {"class": "tests.apps.counting:WordCount", "inputs": ["in"], "outputs": ["out"]},
        },
    }, name="dedupmetric")
    topic = pipeline.processors["counter"].inputs[0]
    workers = {name: Worker(pipeline, name, bootstrap) for name in ("counter", "plain")}
    try:
        task = PartitionTask(topic, 0, PartitionStore(MemoryKV()))  # not an assigned partition: no lag probe
        msgs = [RawMessage(topic, 0, i, b"k", orjson.dumps({"v": i % 2}), 1000) for i in range(5)]
        assert workers["counter"].engine.process_messages(msgs, lambda t, p: task) == 5
        assert workers["counter"].duplicates == 3 and workers["plain"].duplicates == 0
        collector = StylusCollector(pipeline, lambda: workers, bootstrap)
        family = next(f for f in collector.collect() if f.name == "stylus_duplicates_dropped")
        samples = {s.labels["processor"]: s.value for s in family.samples if s.name.endswith("_total")}
        assert samples == {"counter": 3.0}  # only processors with `dedup` report it
        collector.close()
    finally:
        for worker in workers.values():
            worker.consumer.close()
            worker.producer.flush(5)
        workers.clear()  # drop the clients now, not after the session's broker is gone
