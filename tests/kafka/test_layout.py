"""A declared topic that exists with another layout is refused by `topics create`, `validate` and `run`."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.layout import TopicMismatch
from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus

DOC: dict[str, Any] = {
    "topics": {"words": {"partitions": 4}, "counts": {"partitions": 2}},
    "processors": {"counter": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                               "checkpoint": {"interval": "200ms"}}},
}


def _existing_with(bootstrap: str, topic: str, partitions: int) -> None:
    create_topics(bootstrap, {topic: TopicSpec(partitions=partitions)})  # no pipeline: made as asked


def _topics(bootstrap: str) -> dict[str, Any]:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def test_create_topics_refuses_a_partition_mismatch_and_creates_nothing(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    path, pipeline = pipeline_factory(DOC, create=False)
    words, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    _existing_with(bootstrap, words, 2)
    with pytest.raises(TopicMismatch) as err:
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    text = str(err.value)
    assert f"topic `{words}` has 2 partitions on the cluster, but {path} declares 4 (topics.{words}.partitions)" \
        in text
    assert f"set `partitions: 2` under `topics.{words}` in {path}" in text
    assert f"--alter --topic {words} --partitions 4" in text and f"--delete --topic {words}" in text
    assert counts not in _topics(bootstrap)  # refused before anything was created
    [mismatch] = err.value.mismatches
    assert (mismatch.topic, mismatch.declared, mismatch.actual) == (words, 4, 2)


def test_the_cli_refuses_the_mismatch_in_topics_create_validate_and_run(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    path, pipeline = pipeline_factory(DOC, create=False)
    words = pipeline.processors["counter"].inputs[0]
    _existing_with(bootstrap, words, 6)
    for args in (("topics", "create"), ("validate",), ("run", "--exit-when-idle", "1")):
        result = run_stylus(*args, str(path), bootstrap=bootstrap, timeout=60)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert f"topic `{words}` has 6 partitions on the cluster, but {path} declares 4" in result.stderr, args
        assert "fix: set `partitions: 6`" in result.stderr and "Traceback" not in result.stderr, args
        assert "processed" not in result.stdout, args  # `run` started no processor


def test_validate_checks_a_reachable_cluster_and_passes_when_topics_match(
        bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    path, _ = pipeline_factory(DOC)
    result = run_stylus("validate", str(path), bootstrap=bootstrap, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"the existing ones match the cluster at {bootstrap}" in result.stdout


def test_a_changelog_narrower_than_its_input_is_refused(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    doc = {**DOC, "processors": {"counter": {**DOC["processors"]["counter"],
                                             "semantics": {"state": "exactly_once", "output": "exactly_once"},
                                             "state": {"changelog": True}}}}
    path, pipeline = pipeline_factory(doc, create=False)
    words = pipeline.processors["counter"].inputs[0]
    changelog = pipeline.changelog_topic("counter", words)
    _existing_with(bootstrap, changelog, 1)
    with pytest.raises(TopicMismatch) as err:
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    text = str(err.value)
    assert f"topic `{changelog}` has 1 partitions on the cluster, but needs 4" in text
    assert f"one partition per partition of `{words}` (topics.{words}.partitions in {path})" in text


def test_an_explicit_replication_factor_must_match_too(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    doc = {**DOC, "topics": {**DOC["topics"], "counts": {"partitions": 2, "replication_factor": 3}}}
    path, pipeline = pipeline_factory(doc, create=False)
    counts = pipeline.processors["counter"].outputs[0]
    _existing_with(bootstrap, counts, 2)  # one replica: the embedded broker is one node
    with pytest.raises(TopicMismatch) as err:
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    assert f"topic `{counts}` has 1 replicas on the cluster, but {path} declares 3" in str(err.value)
    # unset, the replication factor is only what a new topic gets: an existing topic's own is fine
    _, plain = pipeline_factory(DOC, create=False)
    _existing_with(bootstrap, plain.processors["counter"].outputs[0], 2)
    assert set(create_topics(bootstrap, pipeline_topics(plain), plain).values()) == {"created", "exists"}
