"""Existing topics against what the pipeline declares for them.

A topic that already exists is not created again, so a partition count in the YAML that differs from
the topic's would be ignored: keys would land elsewhere than the pipeline's other topics, and control
records (stylus/eventtime/control.py) would reach only the declared partitions, so a windowed stage
downstream would wait forever on the others. `stylus topics create`, `validate` and `run` refuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stylus.config.model import Pipeline, TopicSpec
from stylus.errors import ClearError


@dataclass(frozen=True)
class Mismatch:
    topic: str
    setting: str  # "partitions" or "replication_factor"
    declared: int
    actual: int
    path: str  # where the YAML sets it, e.g. "topics.events.partitions"
    why: str = ""  # for topics the pipeline derives (changelogs): what fixes their width


class TopicMismatch(ClearError):
    """Existing topics whose partitions (or explicit replication factor) differ from the pipeline's."""

    def __init__(self, mismatches: list[Mismatch], pipeline: Pipeline, bootstrap: str) -> None:
        self.mismatches = mismatches
        lines = [_render(m, pipeline.source, bootstrap) for m in mismatches]
        super().__init__(f"existing topics differ from {pipeline.source}; refusing to use them\n" + "\n".join(lines))


def checked_specs(pipeline: Pipeline, topics: Mapping[str, TopicSpec]) -> dict[str, tuple[TopicSpec, str, str]]:
    """topic -> (spec, YAML path, why) for the topics whose layout matters: the declared ones and the state
    changelogs (partition p of a changelog holds the state of input partition p). Dead-letter and late
    topics are only read by people and tools, whatever their width."""
    checked = {t: (spec, f"topics.{t}", "") for t, spec in topics.items() if t in pipeline.topics}
    for name, spec in pipeline.processors.items():
        if spec.state.changelog:
            for source in spec.inputs:
                topic = pipeline.changelog_topic(name, source)
                if topic in topics:
                    why = f"the state changelog of `{name}` needs one partition per partition of `{source}`"
                    checked[topic] = (topics[topic], f"topics.{source}.partitions", why)
    return checked


def find_mismatches(metadata: Mapping[str, Any], pipeline: Pipeline,
                    topics: Mapping[str, TopicSpec]) -> list[Mismatch]:
    """Compare `metadata` (ClusterMetadata.topics) with the specs of the topics that exist."""
    found: list[Mismatch] = []
    for topic, (spec, path, why) in sorted(checked_specs(pipeline, topics).items()):
        meta = metadata.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            continue
        actual = len(meta.partitions)
        if actual != spec.partitions:
            found.append(Mismatch(topic, "partitions", spec.partitions, actual,
                                  path if why else f"{path}.partitions", why))
        replicas = len(next(iter(meta.partitions.values())).replicas)
        explicit = "replication_factor" in spec.model_fields_set and not why
        if explicit and replicas != spec.replication_factor:
            found.append(Mismatch(topic, "replication_factor", spec.replication_factor, replicas,
                                  f"{path}.replication_factor"))
    return found


def check_layout(metadata: Mapping[str, Any], pipeline: Pipeline, topics: Mapping[str, TopicSpec],
                 bootstrap: str) -> None:
    mismatches = find_mismatches(metadata, pipeline, topics)
    if mismatches:
        raise TopicMismatch(mismatches, pipeline, bootstrap)


def _render(m: Mismatch, file: str, bootstrap: str) -> str:
    tool = f"kafka-topics.sh --bootstrap-server {bootstrap}"
    if m.setting == "replication_factor":
        return (f"  topic `{m.topic}` has {m.actual} replicas on the cluster, but {file} declares {m.declared} "
                f"({m.path})\n    fix: set `replication_factor: {m.actual}` there, or remove it, or reassign the "
                f"topic's replicas (kafka-reassign-partitions.sh)")
    if m.why:  # a derived topic: its width follows the input's
        return (f"  topic `{m.topic}` has {m.actual} partitions on the cluster, but needs {m.declared}: {m.why} "
                f"({m.path} in {file})\n    fix: delete it ({tool} --delete --topic {m.topic}) so "
                f"`stylus topics create` makes it again with {m.declared} partitions")
    grow = (f", or add partitions ({tool} --alter --topic {m.topic} --partitions {m.declared}; existing keys "
            "then map to other partitions)") if m.actual < m.declared else ""
    return (f"  topic `{m.topic}` has {m.actual} partitions on the cluster, but {file} declares {m.declared} "
            f"({m.path})\n    fix: set `partitions: {m.actual}` under `{m.path.rpartition('.')[0]}` in {file}"
            f"{grow}, or delete the topic so it is created with {m.declared} ({tool} --delete --topic {m.topic}; "
            "its records are lost)")
