"""Settings that are valid on their own but would do nothing where they are written.

A YAML that sets something must get it: where a setting cannot apply to a processor, the loader
refuses it with the fix, rather than accepting it and silently running without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stylus.config.durations import format_duration
from stylus.config.errors import Problem
from stylus.config.model import Pipeline

#: `event_time` settings that shape the watermark of partitions read from outside the pipeline only: a
#: partition written by another processor takes its watermark from that processor's control records.
SOURCE_ONLY = {
    "idle_timeout": "an idle upstream partition is released by the upstream stage itself",
    "confidence": "the lateness of this stage's input is bounded by the upstream's watermark, not estimated here",
}


def source_processors(pipeline: Pipeline, name: str) -> list[str]:
    """The processors upstream of `name` (transitively) that read at least one topic from outside."""
    found: list[str] = []
    seen: set[str] = set()
    stack = list(pipeline.upstream_of(name))
    while stack:
        proc = stack.pop()
        if proc in seen:
            continue
        seen.add(proc)
        if any(not pipeline.producers_of(t) for t in pipeline.processors[proc].inputs):
            found.append(proc)
        stack.extend(pipeline.upstream_of(proc))
    return sorted(found)


def check_event_time(pipeline: Pipeline) -> list[Problem]:
    """`idle_timeout` and `confidence` on a stage none of whose inputs is a source topic."""
    problems: list[Problem] = []
    for name, spec in pipeline.processors.items():
        event_time = spec.event_time
        if event_time is None or any(not pipeline.producers_of(t) for t in spec.inputs):
            continue
        writers = sorted({p for t in spec.inputs for p in pipeline.producers_of(t)})
        sources = source_processors(pipeline, name) or writers
        for field, why in SOURCE_ONLY.items():
            if field not in event_time.model_fields_set:
                continue
            value = getattr(event_time, field)
            shown = format_duration(value) if field == "idle_timeout" else str(value)
            problems.append(Problem(
                f"processors.{name}.event_time.{field}",
                f"`{field}` does nothing here: every input of `{name}` ({', '.join(spec.inputs)}) is written by "
                f"{_names(writers)} of this pipeline, and its watermark follows theirs ({why})",
                f"remove `{field}` here; {_where(pipeline, sources, field, shown)}; to let this stage wait "
                "longer for its input, raise its `allowed_lateness`",
            ))
    return problems


def check_state(pipeline: Pipeline) -> list[Problem]:
    """`state.backup` on a stateless processor: there is no state to copy, so no backup would ever run."""
    return [
        Problem(f"processors.{name}.state.backup",
                f"`{name}` is stateless (no `semantics.state`), so `state.backup` would never run",
                "remove `backup` under `state`, or make the processor stateful, e.g. "
                "`semantics: {state: exactly_once, output: at_least_once}`")
        for name, spec in pipeline.processors.items()
        if spec.state.backup is not None and not spec.stateful
    ]


def check_event_field(pipeline: Pipeline) -> list[Problem]:
    """`event_time.field` read from values that are never JSON objects: every record would use its timestamp."""
    problems: list[Problem] = []
    for name, spec in pipeline.processors.items():
        if spec.event_time is None or spec.event_time.field is None:
            continue
        serdes = {pipeline.topics[t].serde for t in spec.inputs if t in pipeline.topics}
        if serdes and "json" not in serdes:
            problems.append(Problem(
                f"processors.{name}.event_time.field",
                f"`field: {spec.event_time.field}` is read from JSON objects, but every input of `{name}` has serde "
                f"{' / '.join(sorted(serdes))}: each record would use its Kafka timestamp instead",
                "remove `field` (the record timestamp is the event time), or declare the input topics "
                "`serde: json`"))
    return problems


def check_overlap(pipeline: Pipeline) -> list[Problem]:
    """`checkpoint.overlap: true` where checkpoints run on the worker's thread: the postgres backend, and
    `command` processors (Swift's stop-and-checkpoint, docs/executable.md)."""
    problems = []
    for name, spec in pipeline.processors.items():
        if not (spec.checkpoint.overlap and "overlap" in spec.checkpoint.model_fields_set):
            continue
        if spec.command is not None:
            problems.append(Problem(
                f"processors.{name}.checkpoint.overlap",
                "`overlap: true` cannot apply to a `command` processor: its one thread stops writing input lines "
                "and reading answers while it commits (the program goes on with what its pipes hold)",
                "remove `overlap`; `checkpoint.records` / `checkpoint.bytes` set how often a commit interrupts"))
        elif spec.state.backend == "postgres":
            problems.append(Problem(
                f"processors.{name}.checkpoint.overlap",
                "`overlap: true` cannot apply with `state.backend: postgres`: state, deltas and offsets commit in "
                "one database transaction on the worker's thread, so processing waits for each checkpoint",
                "remove `overlap`, or use `backend: rocksdb`"))
    return problems


def check_alerts(pipeline: Pipeline) -> list[Problem]:
    """`alerts.backup_stale` on a processor with no backup (after the profile's defaults): no rule would use it."""
    return [
        Problem(f"processors.{name}.alerts.backup_stale",
                f"`backup_stale` alerts on state backups, and `{name}` has no `state.backup` "
                "(neither in the YAML nor from the profile's `defaults.backup_uri`)",
                "remove `backup_stale`, or add `backup: {uri: ...}` under `state`")
        for name, spec in pipeline.processors.items()
        if spec.alerts.backup_stale is not None and spec.state.backup is None
    ]


def check_admin_settings(pipeline: Pipeline) -> list[Problem]:
    """Settings under `kafka.admin`: the admin client keeps only what reaching the cluster needs
    (stylus/kafka/settings.py), so anything else there would be dropped."""
    from stylus.kafka.settings import is_connection_key  # stylus.kafka builds on this package: import late

    blocks = [("kafka", pipeline.kafka)] + [(f"processors.{n}.kafka", s.kafka) for n, s in pipeline.processors.items()]
    problems: list[Problem] = []
    for where, block in blocks:
        admin = block.get("admin")
        if not isinstance(admin, Mapping):
            continue
        for key in sorted(k for k in admin if k not in ("bootstrap.servers", "client.id") and not is_connection_key(k)):
            problems.append(Problem(
                f"{where}.admin.{key}",
                f"`{key}` would be dropped: the admin client takes only the settings that reach the cluster "
                "(security.*, sasl.*, ssl.*, socket.*, client.dns.*, ...)",
                f"remove `{key}` under `admin`, or put it under `consumer` or `producer`"))
    return problems


def check_at_most_once_producer(pipeline: Pipeline) -> list[Problem]:
    """Producer retries (or the idempotent producer), or `acks` waiting for the replicas, on a processor with
    at-most-once output: a request sent again can write an output twice, which that output's promise forbids
    (stylus/kafka/settings.py, AT_MOST_ONCE_PRODUCER)."""
    from stylus.kafka.settings import AT_MOST_ONCE_ACKS, RETRY_KEYS  # stylus.kafka builds on this package

    problems: list[Problem] = []
    for name, spec in pipeline.processors.items():
        if spec.semantics.output != "at_most_once":
            continue
        # the producer's settings as the worker layers them (stylus/kafka/settings.py, client_config): the
        # pipeline's, then the processor's, each block's `producer:` over its common settings; the last wins
        effective: dict[str, tuple[str, Any]] = {}
        for where, block in (("kafka", pipeline.kafka), (f"processors.{name}.kafka", spec.kafka)):
            for prefix, settings in ((where, block), (f"{where}.producer", block.get("producer") or {})):
                if isinstance(settings, Mapping):
                    effective.update((key, (prefix, value)) for key, value in settings.items()
                                     if not isinstance(value, Mapping))
        for key, (prefix, value) in effective.items():
            if key == "enable.idempotence" and str(value).lower() == "true":
                problems.append(_retrying(name, prefix, key, "the idempotent producer retries a request whose "
                                          "answer was lost"))
            elif key in RETRY_KEYS and str(value) not in ("0", ""):
                problems.append(_retrying(name, prefix, key, f"`{key}: {value}` retries a request whose answer "
                                          "was lost"))
            elif key in ("acks", "request.required.acks") and str(value) not in AT_MOST_ONCE_ACKS:
                problems.append(_retrying(
                    name, prefix, key, f"`{key}: {value}` makes the leader wait for its replicas, and a leader that "
                    "loses its leadership meanwhile answers \"not the leader\" for records it has written, which "
                    "the client then sends again whatever its retry count"))
    return problems


def _retrying(name: str, block: str, key: str, why: str) -> Problem:
    return Problem(f"{block}.{key}",
                   f"{why}, so an output of `{name}` could be written twice; its "
                   "`semantics.output: at_most_once` allows each output once at most",
                   f"remove `{key}` for `{name}` (its producer sends each output once), set it for `{name}` alone "
                   f"under `processors.{name}.kafka.producer`, or use "
                   "`output: at_least_once`")


def check_applicability(pipeline: Pipeline) -> list[Problem]:
    """Every check; `pipeline` with the profile's defaults applied (a profile may supply the backup)."""
    return (check_event_time(pipeline) + check_state(pipeline) + check_event_field(pipeline)
            + check_overlap(pipeline) + check_alerts(pipeline) + check_admin_settings(pipeline)
            + check_at_most_once_producer(pipeline))


def _names(processors: list[str]) -> str:
    return ", ".join(f"`{p}`" for p in processors)


def _where(pipeline: Pipeline, sources: list[str], field: str, shown: str) -> str:
    """Where the setting does apply: under `event_time` of the processors that read the source topics."""
    timed = [p for p in sources if pipeline.processors[p].event_time is not None]
    if timed:
        return f"it applies under `event_time` of {_names(timed)}, which read the source topics (`{field}: {shown}`)"
    return (f"it applies to the processors that read the source topics ({_names(sources)}), under an `event_time` "
            "block there (which also makes them judge late records)")
