"""`stylus validate` against the cluster, when one is configured and answers."""

from __future__ import annotations

import click

from stylus.config.model import Pipeline
from stylus.kafka.admin import pipeline_topics
from stylus.kafka.layout import check_layout
from stylus.kafka.reach import BrokerUnreachable, probe
from stylus.kafka.settings import bootstrap_from, bootstrap_origin

VALIDATE_TIMEOUT = 3.0  # validate works offline too: a missing cluster only skips this check


def check_cluster(pipeline: Pipeline) -> str | None:
    """A line saying the topics were checked against the configured cluster, or None when none is configured
    (validate never starts the embedded broker) or it does not answer (said on stderr; the YAML itself is
    still valid). Raises `TopicMismatch` when an existing topic differs from its declaration."""
    bootstrap = bootstrap_from(pipeline)
    if not bootstrap:
        return None
    try:
        metadata = probe(bootstrap, pipeline, bootstrap_origin(pipeline), timeout=VALIDATE_TIMEOUT)
    except BrokerUnreachable as exc:
        click.echo(f"note: topics not checked against the cluster: {exc}", err=True)
        return None
    check_layout(metadata.topics, pipeline, pipeline_topics(pipeline), bootstrap)
    return f"topics: the existing ones match the cluster at {bootstrap}"
