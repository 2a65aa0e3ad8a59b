"""The worker's transactional producer (stylus/runtime/transactions.py, T1-T5) on the real broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer

from stylus.api import import_processor_class
from stylus.config.model import Pipeline
from stylus.core.engine import RaiseFailures
from stylus.core.engines import engine_for
from stylus.kafka.settings import client_config
from stylus.runtime.sink import KafkaSink
from stylus.runtime.transactions import Fenced, WorkerTransaction, fence_producer
from tests.conftest import PipelineFactory
from tests.support.kafka import read_raw


def _transaction(bootstrap: str, pipeline_factory: PipelineFactory) -> tuple[Pipeline, Consumer, WorkerTransaction]:
    """A counting processor's WorkerTransaction (not started), with the consumer whose group it commits to."""
    _, pipeline = pipeline_factory({
        "topics": {"words": {"partitions": 1}, "counts": {"partitions": 1}},
        "processors": {"p": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                             "semantics": {"state": "exactly_once", "output": "exactly_once"}}}})
    spec = pipeline.processors["p"]
    consumer = Consumer(client_config("consumer", bootstrap, pipeline, "p", **{"group.id": pipeline.group_id("p")}))
    processor = import_processor_class(spec.class_)(config=spec.config, name="p")
    sink = KafkaSink(None, pipeline, spec.outputs, hold=False)
    engine = engine_for(processor, "p", spec, pipeline, sink, RaiseFailures())
    return pipeline, consumer, WorkerTransaction(pipeline, "p", bootstrap, consumer, engine.ctx, "test")



@pytest.mark.parametrize("given_up", ["aborted", "abandoned", "fenced"])
def test_records_of_a_transaction_given_up_do_not_fail_the_next_commit(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, given_up: str) -> None:
    """An abort purges the records still queued, and each is reported as failed; so are the records of a
    producer given up after a failed transaction, when it is flushed on its way out. None of them belongs to
    the next transaction: its commit succeeds, where it used to fail the worker with the aborted records'
    failures (a broker restart in CI: `2000 transactional records failed delivery`). A producer fenced by the
    partitions' next owner fails its commit (`Fenced`); polled or flushed, it would raise its fatal error once
    more, so it is left alone until the next assignment replaces it (a resumed zombie's worker used to stop
    there instead of rejoining)."""
    pipeline, consumer, txn = _transaction(bootstrap, pipeline_factory)
    out = pipeline.processors["p"].outputs[0]
    try:
        txn.start()
        txn.begin()
        for i in range(500):  # lingering in the producer's queue when the transaction is given up
            txn.producer.produce(out, f"lost-{i}".encode())
        if given_up == "aborted":
            txn.abort()
        elif given_up == "abandoned":
            txn.abandon()
            txn.start()  # a new producer; the old one is flushed and closed
        else:
            txn.producer.flush(10)
            fence_producer(bootstrap, pipeline, "p", txn.transactional_id)
            with pytest.raises(Fenced):
                txn.commit()
            txn.abandon()  # as a failed checkpoint gives it up; the worker serves it until the rejoin
            txn.poll()
            fenced_id = txn.transactional_id
            txn.start()
            assert txn.transactional_id != fenced_id and txn.ready
        txn.begin()
        txn.producer.produce(out, b"kept")
        txn.commit()
    finally:
        txn.close()
        consumer.close()
    assert [m.value() for m in read_raw(bootstrap, out)] == [b"kept"]
