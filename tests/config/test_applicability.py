"""Settings that would be accepted and then do nothing are refused, with the fix; where they apply they pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import PipelineError, load_pipeline, parse_pipeline
from stylus.config.model import Pipeline

ROOT = Path(__file__).resolve().parents[2]


def _chain(down_event_time: dict[str, Any], *, up: dict[str, Any] | None = None,
           down_inputs: tuple[str, ...] = ("mid",)) -> str:
    processors: dict[str, Any] = {
        "up": {"class": "tests.apps.timed:Collect", "inputs": ["src"], "outputs": ["mid"],
               "semantics": {"output": "at_least_once"}, **(up or {})},
        "down": {"class": "tests.apps.timed:Windowed", "inputs": list(down_inputs), "outputs": ["out"],
                 "event_time": down_event_time},
    }
    topics = {t: {"partitions": 2} for t in ("src", "mid", "out", "side")}
    return yaml.safe_dump({"pipeline": "ap", "topics": topics, "processors": processors}, sort_keys=False)


def _problems(text: str) -> PipelineError:
    with pytest.raises(PipelineError) as err:
        parse_pipeline(text, file="ap.yaml")
    return err.value


@pytest.mark.parametrize(("field", "value", "shown"), [("idle_timeout", "3s", "3s"), ("confidence", 0.9, "0.9")])
def test_source_only_event_time_settings_are_refused_on_a_downstream_stage(field: str, value: Any,
                                                                            shown: str) -> None:
    error = _problems(_chain({"field": "ts", field: value}, up={"event_time": {"field": "ts"}}))
    [problem] = error.problems
    assert problem.path == f"processors.down.event_time.{field}"
    assert "every input of `down` (mid) is written by `up`" in problem.message
    assert f"remove `{field}` here" in problem.fix
    assert "under `event_time` of `up`" in problem.fix and f"`{field}: {shown}`" in problem.fix
    assert problem.line is not None and "ap.yaml:" in str(error)


def test_the_fix_warns_when_the_source_stage_has_no_event_time_yet() -> None:
    [problem] = _problems(_chain({"idle_timeout": "1s"})).problems
    assert "(`up`), under an `event_time` block there (which also makes them judge late records)" in problem.fix


def test_allowed_lateness_is_accepted_downstream_and_source_settings_where_a_source_is_read() -> None:
    downstream = parse_pipeline(_chain({"field": "ts", "allowed_lateness": "30s", "late": "update"}))
    assert downstream.processors["down"].event_time is not None
    assert downstream.processors["down"].event_time.allowed_lateness == 30.0
    # a stage that also reads a source topic has partitions whose watermark it estimates itself
    mixed = parse_pipeline(_chain({"idle_timeout": "2s", "confidence": 0.95}, down_inputs=("mid", "side")))
    assert mixed.processors["down"].event_time is not None
    assert mixed.processors["down"].event_time.confidence == 0.95
    source = parse_pipeline(_chain({}, up={"event_time": {"idle_timeout": "1s", "confidence": 0.99}}))
    assert source.processors["up"].event_time is not None


def test_a_backup_of_a_stateless_processor_is_refused() -> None:
    doc = yaml.safe_load(_chain({}))
    doc["processors"]["up"]["state"] = {"backup": {"uri": "file:///tmp/backups"}}
    [problem] = _problems(yaml.safe_dump(doc)).problems
    assert problem.path == "processors.up.state.backup"
    assert "stateless" in problem.message and "remove `backup`" in problem.fix
    doc["processors"]["up"]["semantics"] = {"state": "exactly_once", "output": "at_least_once"}
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"].state.backup is not None


@pytest.mark.parametrize("profile", [None, "local", "compose", "production"])
def test_the_shipped_pipelines_validate_under_every_profile(monkeypatch: pytest.MonkeyPatch,
                                                            profile: str | None) -> None:
    monkeypatch.delenv("STYLUS_PROFILE", raising=False)
    if profile:
        monkeypatch.setenv("STYLUS_PROFILE", profile)
    for path in sorted((ROOT / "pipelines").glob("*.yaml")):
        pipeline: Pipeline = load_pipeline(path, import_classes=True)
        assert pipeline.processors
    trending = load_pipeline(ROOT / "pipelines" / "trending_events.yaml")
    for name in ("scorer", "ranker"):  # downstream stages: their grace applies (stylus/eventtime/tracker.py)
        spec = trending.processors[name].event_time
        assert spec is not None and spec.allowed_lateness > 0
        assert not {"idle_timeout", "confidence"} & spec.model_fields_set


def test_an_event_time_field_on_inputs_that_are_never_json_is_refused() -> None:
    doc = yaml.safe_load(_chain({}, up={"event_time": {"field": "ts"}}))
    doc["topics"]["src"]["serde"] = "string"
    [problem] = _problems(yaml.safe_dump(doc)).problems
    assert problem.path == "processors.up.event_time.field"
    assert "serde string" in problem.message and "remove `field`" in problem.fix
    doc["topics"]["src"]["serde"] = "json"
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"].event_time is not None


@pytest.mark.parametrize("where", ["postgres", "command"])
def test_overlap_where_checkpoints_stop_the_worker_is_refused(where: str) -> None:
    doc = yaml.safe_load(_chain({}))
    up = doc["processors"]["up"]
    if where == "postgres":
        up.update({"semantics": {"state": "exactly_once", "output": "at_least_once"},
                   "state": {"backend": "postgres", "dsn": "postgresql://u@h/db"}})
    else:
        del up["class"]
        up.update({"command": ["cat"], "semantics": {"output": "at_least_once"}})
    up["checkpoint"] = {"overlap": True}
    [problem] = _problems(yaml.safe_dump(doc)).problems
    assert problem.path == "processors.up.checkpoint.overlap" and "remove `overlap`" in problem.fix
    del up["checkpoint"]
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"]


def test_backup_stale_without_a_backup_is_refused_unless_the_profile_gives_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STYLUS_PROFILE", raising=False)
    doc = yaml.safe_load(_chain({}))
    doc["processors"]["up"]["semantics"] = {"state": "exactly_once", "output": "at_least_once"}
    doc["processors"]["up"]["alerts"] = {"backup_stale": "20m"}
    [problem] = _problems(yaml.safe_dump(doc)).problems
    assert problem.path == "processors.up.alerts.backup_stale" and "add `backup: {uri: ...}`" in problem.fix
    monkeypatch.setenv("STYLUS_PROFILE", "compose")  # its defaults give stateful processors a backup
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"].state.backup is not None


def test_admin_settings_that_the_admin_client_would_drop_are_refused() -> None:
    doc = yaml.safe_load(_chain({}))
    doc["processors"]["up"]["kafka"] = {"admin": {"request.timeout.ms": 5000, "sasl.mechanism": "PLAIN"}}
    [problem] = _problems(yaml.safe_dump(doc)).problems
    assert problem.path == "processors.up.kafka.admin.request.timeout.ms"
    assert "put it under `consumer` or `producer`" in problem.fix
    doc["processors"]["up"]["kafka"] = {"admin": {"sasl.mechanism": "PLAIN"}}  # reaching the cluster: kept
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"].kafka["admin"]["sasl.mechanism"] == "PLAIN"


@pytest.mark.parametrize(("block", "setting"), [("pipeline", {"enable.idempotence": True}),
                                                ("producer", {"message.send.max.retries": 3}),
                                                ("processor", {"retries": "5"}),
                                                ("producer", {"acks": "all"}),
                                                ("pipeline", {"acks": -1})])
def test_producer_retries_with_at_most_once_output_are_refused(block: str, setting: dict[str, Any]) -> None:
    doc = yaml.safe_load(_chain({}))
    up = doc["processors"]["up"]
    up["semantics"] = {"output": "at_most_once"}
    if block == "pipeline":
        doc["kafka"] = setting
    else:
        up["kafka"] = {"producer": setting} if block == "producer" else setting
    [problem] = _problems(yaml.safe_dump(doc)).problems
    key = next(iter(setting))
    assert problem.path.endswith(f".{key}") and "written twice" in problem.message
    assert f"remove `{key}`" in problem.fix and "at_least_once" in problem.fix
    up["semantics"] = {"output": "at_least_once"}  # retries are what at-least-once output wants
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"]


def test_a_pipeline_wide_acks_all_is_taken_when_the_at_most_once_processor_overrides_it() -> None:
    doc = yaml.safe_load(_chain({}))
    doc["kafka"] = {"acks": "all", "producer": {"retries": 5}}  # for the pipeline's other processors
    up = doc["processors"]["up"]
    up["semantics"] = {"output": "at_most_once"}
    assert {p.path for p in _problems(yaml.safe_dump(doc)).problems} == {"kafka.acks", "kafka.producer.retries"}
    up["kafka"] = {"producer": {"acks": 1, "retries": 0}}
    assert parse_pipeline(yaml.safe_dump(doc)).processors["up"]
