"""A backfill task's output producer: bulk-batched unless the pipeline says otherwise."""

from __future__ import annotations

from typing import Any

import yaml

from stylus.backfill.outputs import BULK_PRODUCER, producer_settings
from stylus.config import parse_pipeline


def settings(kafka: dict[str, Any]) -> dict[str, Any]:
    doc = {"pipeline": "bulk", "kafka": kafka, "topics": {"a": {}, "b": {}},
           "processors": {"count": {"class": "tests.apps.counting:WordCount", "inputs": ["a"], "outputs": ["b"]}}}
    return producer_settings(parse_pipeline(yaml.safe_dump(doc)), "count", "b:1")


def test_the_output_producer_batches_in_bulk_unless_the_yaml_sets_its_own() -> None:
    plain = settings({})
    assert {k: plain[k] for k in BULK_PRODUCER} == BULK_PRODUCER
    assert plain["delivery.report.only.error"] is True  # a task checks failures only
    assert plain["enable.idempotence"] is True  # the stream's safety settings stay
    own = settings({"producer": {"linger.ms": 1}})
    assert own["linger.ms"] == 1
    assert own["batch.num.messages"] == BULK_PRODUCER["batch.num.messages"]
