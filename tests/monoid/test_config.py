"""`state.backend` in the pipeline YAML: postgres needs a dsn, stateful non-transactional semantics and a
MonoidProcessor class; the same monoid class is valid on both backends."""

from __future__ import annotations

import pytest
import yaml

from stylus.config import PipelineError, parse_pipeline
from tests.monoid.helpers import pipeline_doc


def _parse(doc: dict, **kwargs) -> object:
    return parse_pipeline(yaml.safe_dump(doc), import_classes=True, **kwargs)


def test_the_same_monoid_class_is_valid_on_both_backends() -> None:
    local = _parse(pipeline_doc("processors.counters:EventCounter"))
    assert local.processors["agg"].state.backend == "rocksdb"  # type: ignore[attr-defined]
    text = yaml.safe_dump(pipeline_doc("processors.counters:EventCounter", backend="postgres", dsn="X")).replace(
        "dsn: X", "dsn: ${STYLUS_PG_DSN}")
    remote = parse_pipeline(text, import_classes=True, environ={"STYLUS_PG_DSN": "postgresql://u@h/db"})
    state = remote.processors["agg"].state
    assert (state.backend, state.dsn) == ("postgres", "postgresql://u@h/db")


def test_postgres_without_a_dsn_is_refused() -> None:
    with pytest.raises(PipelineError, match="needs a connection string"):
        _parse(pipeline_doc("processors.counters:EventCounter", backend="postgres"))


def test_one_pipeline_file_switches_backend_by_environment() -> None:
    doc = pipeline_doc("processors.counters:EventCounter", dsn="postgresql://x/y")
    text = yaml.safe_dump(doc).replace("backend: rocksdb", "backend: ${STYLUS_STATE_BACKEND:-rocksdb}")
    for env, backend in (({}, "rocksdb"), ({"STYLUS_STATE_BACKEND": "postgres"}, "postgres")):
        pipeline = parse_pipeline(text, import_classes=True, environ=env)
        assert pipeline.processors["agg"].state.backend == backend


@pytest.mark.parametrize("semantics", [{"output": "at_least_once"},
                                       {"state": "exactly_once", "output": "exactly_once"}])
def test_postgres_needs_stateful_non_transactional_semantics(semantics: dict[str, str]) -> None:
    doc = pipeline_doc("processors.counters:EventCounter", backend="postgres", dsn="postgresql://x/y",
                       semantics=semantics)
    if semantics["output"] == "exactly_once":
        doc["topics"]["out"] = {"partitions": 1}
        doc["processors"]["agg"]["outputs"] = ["out"]
    with pytest.raises(PipelineError, match="cannot also be a Kafka transaction"):
        _parse(doc)


def test_postgres_with_a_processor_that_is_not_a_monoid_is_refused() -> None:
    doc = pipeline_doc("tests.apps.counting:WordCount", backend="postgres", dsn="postgresql://x/y")
    with pytest.raises(PipelineError, match="is not a MonoidProcessor") as info:
        _parse(doc)
    assert "processors.agg.state.backend" in str(info.value)
    _parse(pipeline_doc("tests.apps.counting:WordCount"))  # fine on rocksdb


def test_postgres_with_a_rocksdb_backup_is_refused() -> None:
    doc = pipeline_doc("processors.counters:EventCounter", backend="postgres", dsn="postgresql://x/y")
    doc["processors"]["agg"]["state"]["backup"] = {"uri": "file:///tmp/b"}
    with pytest.raises(PipelineError, match="the database is the durable copy"):
        _parse(doc)
