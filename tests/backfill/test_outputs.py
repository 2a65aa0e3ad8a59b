"""A backfill task's outputs: the producer bulk-batched unless the pipeline says otherwise; a value the stream
could not encode fails its own record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from stylus.api import import_processor_class
from stylus.backfill.outputs import BULK_PRODUCER, OutputTarget, open_output, producer_settings
from stylus.config import parse_pipeline
from stylus.core import PartitionTask, RawMessage, StopProcessing
from stylus.core.engine import RaiseFailures
from stylus.core.engines import engine_for


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


@pytest.mark.parametrize("cls", ["EmitTwice", "EmitTwiceBatch"])
@pytest.mark.parametrize("kind", ["none", "collect", "parquet"])
def test_an_unencodable_emit_fails_the_backfill_at_its_record(tmp_path: Path, cls: str, kind: str) -> None:
    """Held outputs are encoded after the record, where a failure would name no record: the sink's `check`
    fails the record itself, as the stream would (and the stream would dead-letter it)."""
    doc = {"pipeline": "enc", "topics": {"in": {}, "out": {}},
           "processors": {"p": {"class": f"tests.apps.faulty:{cls}", "inputs": ["in"], "outputs": ["out"],
                                "semantics": {"state": "exactly_once", "output": "exactly_once"}}}}
    pipeline = parse_pipeline(yaml.safe_dump(doc))
    target = OutputTarget(kind=kind, path=str(tmp_path) if kind == "parquet" else None)  # type: ignore[arg-type]
    output = open_output(target, pipeline, "p", "unused:1", 0)
    spec = pipeline.processors["p"]
    engine = engine_for(import_processor_class(spec.class_)(), "p", spec, pipeline, output, RaiseFailures())
    engine.atomic = False  # as in a backfill task: any failure fails the task
    engine.start()
    task = PartitionTask("in", 0, None)
    values = [{"n": 0, "bad": False}, {"n": 1, "bad": True}]
    msgs = [RawMessage("in", 0, i, None, orjson.dumps(v), 1000 + i) for i, v in enumerate(values)]
    first = 0 if cls == "EmitTwiceBatch" else 1  # a batch that fails without undo is named by its first record
    with pytest.raises(StopProcessing, match=rf"process failed at in\[0\]@{first}: TypeError"):
        engine.process_messages(msgs, lambda t, p: task)
