"""Topic administration."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from stylus.config.model import Pipeline, TopicSpec
from stylus.kafka.layout import check_layout
from stylus.kafka.settings import client_config, connect


def admin_client(bootstrap: str, pipeline: Pipeline | None = None) -> AdminClient:
    return AdminClient(client_config("admin", bootstrap, pipeline))


def create_topics(
    bootstrap: str,
    topics: dict[str, TopicSpec],
    pipeline: Pipeline | None = None,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Create missing topics. Returns topic -> "created" | "exists". With a pipeline, first refuses
    (`TopicMismatch`) when a topic that exists differs from its declaration (stylus/kafka/layout.py)."""
    admin = admin_client(bootstrap, pipeline)
    metadata = admin.list_topics(timeout=timeout).topics
    if pipeline is not None:
        check_layout(metadata, pipeline, topics, bootstrap)
    existing = set(metadata)
    result = {name: "exists" for name in topics if name in existing}
    new = [
        NewTopic(name, num_partitions=spec.partitions, replication_factor=spec.replication_factor,
                 config=dict(spec.config))
        for name, spec in topics.items()
        if name not in existing
    ]
    if new:
        for name, future in admin.create_topics(new, request_timeout=timeout).items():
            try:
                future.result()
                result[name] = "created"
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                result[name] = "exists"
        wait_for_topics(admin, {t.topic: t.num_partitions for t in new}, timeout)
    return result


def wait_for_topics(admin: AdminClient, partitions: dict[str, int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(timeout=timeout).topics
        if all(t in meta and len(meta[t].partitions) >= n and all(p.leader >= 0 for p in meta[t].partitions.values())
               for t, n in partitions.items()):  # every partition has its leader: records can go there now
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not visible after {timeout}s: {sorted(partitions)}")
        time.sleep(0.05)


def delete_topics(bootstrap: str, names: list[str], timeout: float = 30.0) -> None:
    admin = AdminClient(connect(bootstrap))
    existing = set(admin.list_topics(timeout=timeout).topics)
    names = [n for n in names if n in existing]
    if names:
        for future in admin.delete_topics(names, request_timeout=timeout).values():
            future.result()


def pipeline_topics(pipeline: Pipeline) -> dict[str, TopicSpec]:
    """Declared topics plus one dead-letter topic per processor whose errors go there, and a compacted
    changelog topic per input of a processor with `state.changelog` (as wide as that input: one changelog
    partition per input partition)."""
    topics = dict(pipeline.topics)
    for name, spec in pipeline.processors.items():
        if spec.on_error == "dead_letter":
            width = max(pipeline.topics[t].partitions for t in spec.inputs)
            dlq = TopicSpec(partitions=width, serde="bytes", replication_factor=1)
            topics.setdefault(pipeline.dlq_topic(name), dlq)
        if spec.event_time is not None and spec.event_time.late == "topic":  # late records (stylus/eventtime)
            width = max(pipeline.topics[t].partitions for t in spec.inputs)
            topics.setdefault(f"{pipeline.pipeline}.{name}.late", TopicSpec(partitions=width, serde="bytes"))
        if spec.state.changelog:  # compacted: the latest value of each key is all a restore needs
            for topic in spec.inputs:
                source = pipeline.topics[topic]  # as durable as the input it restores from
                changelog = TopicSpec(partitions=source.partitions, serde="bytes",
                                      replication_factor=source.replication_factor,
                                      config={"cleanup.policy": "compact"})
                topics.setdefault(pipeline.changelog_topic(name, topic), changelog)
    return topics
