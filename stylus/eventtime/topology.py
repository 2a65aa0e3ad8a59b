"""Who sends watermarks to whom, decided from the pipeline alone so every instance agrees.

A processor publishes watermark control records when some processor downstream of it (directly or
through other stages) works in event time: it has `event_time` configured or overrides `on_timer`.
A consumer of a topic written by publishing processors takes its watermark for that topic from
their control records only; topics without such producers (sources) use the data's own event times.
"""

from __future__ import annotations

import functools

from stylus.api import Processor, import_processor_class
from stylus.config.model import Pipeline


def part_id(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


@functools.cache
def _overrides_on_timer(class_path: str) -> bool:
    try:
        cls = import_processor_class(class_path)
    except Exception:  # an unimportable class fails elsewhere; assume it needs time
        return True
    return cls.on_timer is not Processor.on_timer


def tracks_time(pipeline: Pipeline, name: str) -> bool:
    spec = pipeline.processors[name]
    return spec.event_time is not None or (spec.class_ is not None and _overrides_on_timer(spec.class_))


def publishes(pipeline: Pipeline, name: str) -> bool:
    """Whether `name` writes watermark control records to its outputs."""
    seen: set[str] = set()

    def downstream_needs(proc: str) -> bool:
        for topic in pipeline.processors[proc].outputs:
            for consumer in pipeline.consumers_of(topic):
                if consumer in seen:
                    continue
                seen.add(consumer)
                if tracks_time(pipeline, consumer) or downstream_needs(consumer):
                    return True
        return False

    return downstream_needs(name)


def input_parts(pipeline: Pipeline, name: str) -> frozenset[str]:
    spec = pipeline.processors[name]
    return frozenset(part_id(t, p) for t in spec.inputs for p in range(pipeline.topics[t].partitions))


def required_upstreams(pipeline: Pipeline, topic: str) -> dict[str, frozenset[str]]:
    """upstream processor -> the input partitions it must have reported for `topic`'s watermark."""
    return {u: input_parts(pipeline, u) for u in pipeline.producers_of(topic) if publishes(pipeline, u)}


def control_targets(pipeline: Pipeline, name: str) -> list[tuple[str, int]]:
    """Every partition of every output topic that some processor of the pipeline reads."""
    return [
        (topic, p)
        for topic in pipeline.processors[name].outputs
        if pipeline.consumers_of(topic)
        for p in range(pipeline.topics[topic].partitions)
    ]
