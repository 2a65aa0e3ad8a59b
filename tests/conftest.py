"""Fixtures are factories: one Apache Kafka broker per test worker, topics and pipelines per test."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import Pipeline, load_pipeline
from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.settings import forget_connections

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One Apache Kafka per test worker process for the whole session (a JVM starts in seconds); tests share it
    through fresh topic and group names. A test that stops, pauses or restarts a broker starts its own."""
    with EmbeddedBroker() as embedded:
        yield embedded
        gc.collect()  # clients the tests left unreferenced close while the broker still answers them


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap


@pytest.fixture(autouse=True)
def _fresh_connections() -> Iterator[None]:
    """Connection settings remembered by one test's pipeline (SASL/SSL) must not reach the next test."""
    yield
    forget_connections()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_factory(bootstrap: str) -> Iterator[Callable[..., str]]:
    """make_topic(prefix="t", partitions=1) -> a fresh topic name; deleted after the test."""
    made: list[str] = []

    def make(prefix: str = "t", partitions: int = 1) -> str:
        name = unique(prefix)
        create_topics(bootstrap, {name: TopicSpec(partitions=partitions)})
        made.append(name)
        return name

    yield make
    delete_topics(bootstrap, made)


PipelineFactory = Callable[..., tuple[Path, Pipeline]]


@pytest.fixture
def pipeline_factory(tmp_path: Path, bootstrap: str) -> Iterator[PipelineFactory]:
    """make_pipeline(doc) -> (path, Pipeline) with its topics created (unless `create=False`). Topic and
    pipeline names get a unique suffix so tests never share Kafka state; every processor's state dir goes
    under tmp_path unless given."""
    made_topics: list[str] = []

    def make(doc: dict[str, Any], *, name: str = "p", create: bool = True) -> tuple[Path, Pipeline]:
        suffix = uuid.uuid4().hex[:6]
        rename = {t: f"{t}-{suffix}" for t in doc["topics"]}
        doc = dict(doc)
        doc["pipeline"] = f"{doc.get('pipeline', name)}-{suffix}"
        doc["topics"] = {rename[t]: spec for t, spec in doc["topics"].items()}
        procs = {}
        for pname, spec in doc["processors"].items():
            spec = dict(spec)
            spec["inputs"] = [rename.get(t, t) for t in spec.get("inputs", [])]
            spec["outputs"] = [{**t, "topic": rename.get(t["topic"], t["topic"])} if isinstance(t, dict)
                               else rename.get(t, t) for t in spec.get("outputs", [])]  # groupings' mappings too
            state = dict(spec.get("state") or {})
            state.setdefault("dir", str(tmp_path / "state"))
            spec["state"] = state
            procs[pname] = spec
        doc["processors"] = procs
        if doc.get("tables"):  # a table reads one of the renamed topics
            doc["tables"] = {n: {**t, "topic": rename.get(t["topic"], t["topic"])} for n, t in doc["tables"].items()}
        path = tmp_path / f"{doc['pipeline']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        made_topics.extend(rename.values())
        made_topics.extend(f"{doc['pipeline']}.{p}.dlq" for p in procs)
        pipeline = load_pipeline(path)
        made_topics.extend(t for t in pipeline_topics(pipeline) if t not in made_topics)  # changelogs, late topics
        if create:
            create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        return path, pipeline

    yield make
    delete_topics(bootstrap, made_topics)
