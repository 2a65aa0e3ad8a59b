"""Does this cluster hide the records of an aborted transaction from `read_committed` readers?

Kafka does; the embedded broker does not (shared/notes/broker.md). Exactly-once output needs a
`stylus.id` header on every record output only where aborted records show up: there a restarted
owner must recognise the visible records of its predecessor's abandoned transaction and not emit
them again. On a cluster that hides them the header is pure cost (~25% of an exactly-once
processor's CPU per record, BENCHMARKS.md, issue 3), so the worker asks once.

The probe does what it asks about: in a topic of its own, one record in a transaction that is
aborted, then a `read_committed` read past that record's offset. Any doubt (an error, a timeout,
a read that did not get past the record) answers False, the safe side: keep the ids.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from stylus.config.model import Pipeline, TopicSpec
from stylus.kafka.admin import create_topics
from stylus.kafka.producer import close_producer
from stylus.kafka.settings import client_config

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 10.0
_answers: dict[str, bool] = {}  # by bootstrap: a cluster's behaviour does not change while we run


def probe_topic(pipeline: Pipeline) -> str:
    return f"{pipeline.pipeline}.txn-probe"


def hides_aborted_records(bootstrap: str, pipeline: Pipeline, processor: str,
                          timeout: float = PROBE_TIMEOUT) -> bool:
    """True only when an aborted record was seen to stay hidden; cached per cluster for this process."""
    if bootstrap not in _answers:
        started = time.monotonic()
        try:
            _answers[bootstrap] = _probe(bootstrap, pipeline, processor, timeout)
        except (KafkaException, TimeoutError, RuntimeError) as exc:
            log.warning("%s: could not tell whether the cluster hides aborted transactions (%s); exactly-once "
                        "outputs keep their stylus.id header", processor, exc)
            return False  # not cached: the next worker asks again
        log.info("%s: the cluster %s aborted transactional records (probe took %.2f s)", processor,
                 "hides" if _answers[bootstrap] else "shows", time.monotonic() - started)
    return _answers[bootstrap]


def _probe(bootstrap: str, pipeline: Pipeline, processor: str, timeout: float) -> bool:
    topic = probe_topic(pipeline)
    # replicated like the pipeline's own topics: a cluster whose min.insync.replicas an unreplicated topic
    # cannot meet would refuse the probe's write (and the ids would stay for nothing)
    replicas = max(spec.replication_factor for spec in pipeline.topics.values())
    create_topics(bootstrap, {topic: TopicSpec(partitions=1, replication_factor=replicas)}, pipeline,
                  timeout=timeout)
    token = uuid.uuid4().hex.encode()
    delivered: list[Any] = []
    producer = Producer(client_config(
        "producer", bootstrap, pipeline, processor,
        **{"transactional.id": f"{pipeline.group_id(processor)}.txn-probe.{token.decode()}", "linger.ms": 0,
           "delivery.report.only.error": False})
        | {"on_delivery": lambda err, msg: delivered.append((err, msg))})
    try:
        producer.init_transactions(timeout)
        producer.begin_transaction()
        producer.produce(topic, token, None, 0)
        producer.flush(timeout)
        if not delivered or delivered[0][0] is not None:
            raise RuntimeError(f"the probe record was not delivered: {delivered[0][0] if delivered else 'no report'}")
        offset = delivered[0][1].offset()
        producer.abort_transaction(timeout)
    finally:
        close_producer(producer)
    return not _visible(bootstrap, pipeline, processor, topic, token, offset, timeout)


def _visible(bootstrap: str, pipeline: Pipeline, processor: str, topic: str, token: bytes, offset: int,
             timeout: float) -> bool:
    """Read the probe topic `read_committed` from the token's offset until the token shows up (True) or the
    reader's end of the partition lies past it (False): the abort marker moves a Kafka reader's end past it."""
    consumer = Consumer(client_config(
        "consumer", bootstrap, pipeline, processor,
        **{"group.id": f"{pipeline.group_id(processor)}.txn-probe", "isolation.level": "read_committed",
           "enable.partition.eof": True, "auto.offset.reset": "earliest"}))
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])  # from the token on: nothing else to read
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.05):
                error = msg.error()
                if error is None:
                    if msg.value() == token:
                        return True
                elif error.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() > offset:
                        return False
                else:
                    raise KafkaException(error)
        raise TimeoutError(f"the probe read of {topic} did not get past offset {offset} in {timeout:.0f} s")
    finally:
        consumer.close()
