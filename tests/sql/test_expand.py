"""A `sql:` processor becomes ordinary processors at load time: their names, topics, semantics and event time,
and a loaded pipeline that survives the dump-and-parse a backfill's Spark tasks do."""

from __future__ import annotations

from pathlib import Path

import pytest

from stylus.config import Pipeline, PipelineError, load_pipeline
from stylus.describe import describe
from stylus.sql.expand import STAGE, WINDOW_STAGE, stages_of
from tests.sql.helpers import INPUT, write_app

ROOT = Path(__file__).resolve().parents[2]
TWO_TABLES = INPUT.format(events="events") + """
CREATE TABLE hot AS SELECT event_time, category, score FROM events_score WHERE score > 3;
CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM hot [1 minute];
"""
WINDOWED = INPUT.format(events="events") + "CREATE TABLE out AS SELECT category, COUNT(*) AS n FROM events_score " \
                                           "[1 minute];"


def test_an_app_of_several_tables_runs_one_processor_per_table(tmp_path: Path) -> None:
    path = write_app(tmp_path, TWO_TABLES, topics={"events": 1, "hot": 1, "out": 1},
                     processor={"event_time": {"allowed_lateness": "5s"}, "batch": "never"})  # per record
    pipeline = load_pipeline(path)
    assert list(pipeline.processors) == ["app.hot", "app.out"]
    hot, out = pipeline.processors["app.hot"], pipeline.processors["app.out"]
    assert (hot.class_, hot.inputs, hot.outputs) == (STAGE, ("events",), ("hot",))
    assert (out.class_, out.inputs, out.outputs) == (WINDOW_STAGE, ("hot",), ("out",))
    # the projection is stateless; what it writes for the window carries the app's exactly-once state
    assert hot.semantics.pair == (None, "exactly_once")
    assert out.semantics.pair == ("exactly_once", "at_least_once")
    assert hot.event_time is not None and hot.event_time.field == "event_time"
    assert out.event_time is not None and out.event_time.field == "event_time"  # projected, same name
    assert out.event_time.allowed_lateness == 5.0
    assert pipeline.group_id("app.out") == "sqltest.app.out"
    assert stages_of(pipeline, "app") == ["app.hot", "app.out"] and stages_of(pipeline, "app.out") == ["app.out"]
    assert "app.out: stylus.sql.stage:SqlWindowStage  (sql: " in describe(pipeline)


def test_a_projection_alone_is_stateless_with_the_yaml_output(tmp_path: Path) -> None:
    path = write_app(tmp_path, INPUT.format(events="events") + "CREATE TABLE out AS SELECT event FROM events_score;",
                     topics={"events": 2, "out": 1},
                     processor={"semantics": {"output": "at_least_once"}, "batch": "never"})
    (spec,) = load_pipeline(path).processors.values()
    assert spec.class_ == STAGE and spec.semantics.pair == (None, "at_least_once")


def test_a_windowed_table_over_several_partitions_shuffles_by_group(tmp_path: Path) -> None:
    path = write_app(tmp_path, WINDOWED, topics={"events": 3, "out": 1},
                     processor={"event_time": {"allowed_lateness": "5s", "idle_timeout": "2s", "late": "topic"}})
    pipeline = load_pipeline(path)
    assert list(pipeline.processors) == ["app.shuffle", "app"]
    shuffle, window = pipeline.processors["app.shuffle"], pipeline.processors["app"]
    assert pipeline.topics["sqltest.app.shuffle"].partitions == 3
    assert (shuffle.inputs, shuffle.outputs, window.inputs) == (("events",), ("sqltest.app.shuffle",),
                                                               ("sqltest.app.shuffle",))
    assert shuffle.semantics.pair == (None, "exactly_once")
    # the source settings stay where the source is read; lateness and the late policy where windows close
    assert shuffle.event_time is not None and window.event_time is not None
    assert (shuffle.event_time.idle_timeout, shuffle.event_time.allowed_lateness) == (2.0, 0.0)
    assert "idle_timeout" not in window.event_time.model_fields_set
    assert (window.event_time.allowed_lateness, window.event_time.late) == (5.0, "topic")
    assert stages_of(pipeline, "app") == ["app.shuffle", "app"]


@pytest.mark.parametrize("pipeline_file", ["figure2", "two-tables", "shuffle"])
def test_a_loaded_pipeline_parses_again_as_a_backfill_task_does(pipeline_file: str, tmp_path: Path) -> None:
    if pipeline_file == "figure2":
        pipeline = load_pipeline(ROOT / "pipelines" / "top_events.yaml")
    elif pipeline_file == "two-tables":
        pipeline = load_pipeline(write_app(tmp_path, TWO_TABLES, topics={"events": 1, "hot": 1, "out": 1}))
    else:
        pipeline = load_pipeline(write_app(tmp_path, WINDOWED, topics={"events": 2, "out": 1}))
    again = Pipeline.model_validate(pipeline.model_dump(mode="json", by_alias=True))
    assert again.processors == pipeline.processors and again.topics == pipeline.topics


def test_a_missing_sqlglot_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stylus.extras

    monkeypatch.setattr(stylus.extras, "installed", lambda extra: extra != "sql")
    with pytest.raises(PipelineError) as info:
        load_pipeline(write_app(tmp_path, WINDOWED, topics={"events": 1, "out": 1}))
    text = str(info.value)
    assert "processors.app.sql: a `sql:` processor needs sqlglot, which is not installed" in text
    assert "fix: pip install 'stylus[sql]'" in text


def test_a_stage_name_taken_by_another_processor_is_refused(tmp_path: Path) -> None:
    path = write_app(tmp_path, TWO_TABLES, topics={"events": 1, "hot": 1, "out": 1, "x": 1})
    import yaml

    doc = yaml.safe_load(path.read_text())
    doc["processors"]["app.out"] = {"class": "tests.apps.counting:WordCount", "inputs": ["events"], "outputs": ["x"]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PipelineError) as info:
        load_pipeline(path)
    assert "the SQL app runs a processor named `app.out`, a name another processor already has" in str(info.value)
