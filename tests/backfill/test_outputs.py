"""A backfill task's output producer: bulk-batched unless the pipeline says otherwise."""

from __future__ import annotations

from stylus.backfill.outputs import BULK_PRODUCER, producer_settings
from stylus.config import parse_pipeline

PIPELINE = """\
pipeline: bulk
{kafka}
topics:
  a: {{partitions: 1}}
  b: {{partitions: 1}}
processors:
  count:
    class: tests.apps.counting:WordCount
    inputs: [a]
    outputs: [b]
"""


def test_the_output_producer_batches_in_bulk_unless_the_yaml_sets_its_own() -> None:
    plain = producer_settings(parse_pipeline(PIPELINE.format(kafka="")), "count", "b:1")
    assert {k: plain[k] for k in BULK_PRODUCER} == BULK_PRODUCER
    assert plain["delivery.report.only.error"] is True  # a task checks failures only
    assert plain["enable.idempotence"] is True  # the stream's safety settings stay
    own = producer_settings(parse_pipeline(PIPELINE.format(kafka="kafka: {producer: {linger.ms: 1}}")), "count", "b:1")
    assert own["linger.ms"] == 1
    assert own["batch.num.messages"] == BULK_PRODUCER["batch.num.messages"]
