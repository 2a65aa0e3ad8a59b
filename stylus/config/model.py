"""The pipeline YAML as frozen pydantic models (documented in docs/reference.md, "Pipeline YAML")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stylus.config.durations import Duration
from stylus.config.groupings import Grouping, OutputName, groupings_from
from stylus.config.secrets import DsnSetting, KafkaSettings

Mode = Literal["at_least_once", "at_most_once", "exactly_once"]
SerdeName = Literal["json", "string", "bytes"]
ErrorPolicy = Literal["dead_letter", "skip", "stop"]
LatePolicy = Literal["drop", "topic", "update"]

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,200}$"

#: (state, output) pairs of the paper's Figure 8, in its order; `None` state means a stateless processor.
FIGURE8_PAIRS: tuple[tuple[str, str], ...] = (
    ("at_least_once", "at_least_once"),
    ("exactly_once", "at_least_once"),
    ("at_most_once", "at_most_once"),
    ("exactly_once", "at_most_once"),
    ("exactly_once", "exactly_once"),
)
VALID_PAIRS: frozenset[tuple[str, str]] = frozenset(FIGURE8_PAIRS)


class FixableError(ValueError):
    """A validation error that carries the text to write instead."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class TopicSpec(Frozen):
    partitions: int = Field(1, ge=1, le=10_000)
    serde: SerdeName = "json"
    replication_factor: int = Field(1, ge=1, le=32)
    config: dict[str, str] = Field(default_factory=dict)


class Semantics(Frozen):
    state: Mode | None = None
    output: Mode = "at_least_once"
    # exactly-once output: whether outputs carry the `stylus.id` header (MillWheel record ids, for consumers
    # that deduplicate; exactly-once itself rests on the transaction alone). `always`: every output; `auto`:
    # a processor with timers, whose restored or rebuilt state places the fired timers by them
    # (stylus/runtime/timeline.py); `never`: none (docs/semantics.md, "Record ids").
    output_ids: Literal["auto", "always", "never"] = "auto"

    @model_validator(mode="after")
    def _valid_pair(self) -> Semantics:
        if self.state is not None and (self.state, self.output) not in VALID_PAIRS:
            pairs = ", ".join(f"{{state: {s}, output: {o}}}" for s, o in sorted(VALID_PAIRS))
            raise FixableError(
                f"(state={self.state}, output={self.output}) is not a valid pair (the paper's Figure 8): "
                "at-least-once state replays input after a crash, so its output cannot be at-most-once or "
                "exactly-once; at-most-once state skips input, so its output cannot be at-least-once or "
                "exactly-once",
                f"use one of {pairs}",
            )
        if self.output_ids != "auto" and self.output != "exactly_once":
            raise FixableError(
                f"output_ids applies to exactly-once output only; this output is {self.output}",
                "remove `output_ids`, or set `output: exactly_once`",
            )
        return self

    @property
    def pair(self) -> tuple[str | None, str]:
        return (self.state, self.output)


class CheckpointSpec(Frozen):
    interval: Duration = 2.0
    # Swift's knobs, for `command` processors (docs/executable.md): also commit after this many acknowledged
    # input records or bytes of input, whichever comes first
    records: int | None = Field(None, ge=1)
    bytes: int | None = Field(None, ge=1)
    # keep consuming and processing (output held) while a checkpoint's I/O is in flight (paper, Figure 9)
    overlap: bool = True


class BackupSpec(Frozen):
    uri: str = Field(pattern=r"^(file|hdfs|webhdfs)://")
    interval: Duration = 300.0
    keep: int = Field(5, ge=1)
    timeout: Duration = 60.0  # per request to the backup target; a hung target fails the round after this


class StateSpec(Frozen):
    dir: str = "./.stylus/state"
    backup: BackupSpec | None = None
    cache_entries: int = Field(100_000, ge=0)
    # `postgres`: remote state for MonoidProcessor classes (stylus/monoid/), deltas + offsets per transaction
    backend: Literal["rocksdb", "postgres"] = "rocksdb"
    dsn: DsnSetting = None  # libpq connection string, e.g. ${STYLUS_PG_DSN}; required by `postgres`
    table: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")  # default: from pipeline+name
    # a compacted Kafka topic per input topic (Pipeline.changelog_topic) that receives every state change in
    # the checkpoint's transaction: a second restore source for the local RocksDB state (stylus/runtime/changelog.py)
    changelog: bool = False

    @model_validator(mode="after")
    def _backend_settings(self) -> StateSpec:
        if self.backend == "postgres" and not self.dsn:
            raise FixableError(
                "state backend `postgres` needs a connection string",
                "add `dsn: ${STYLUS_PG_DSN}` (e.g. postgresql://user@host:5432/db) under `state`",
            )
        if self.backend == "postgres" and self.backup is not None:
            raise FixableError("`backup` copies local RocksDB state; with `backend: postgres` the database is the "
                               "durable copy", "remove `backup`, or use `backend: rocksdb`")
        if self.backend == "postgres" and self.changelog:
            raise FixableError("`changelog` copies local RocksDB state to Kafka; with `backend: postgres` the "
                               "database is the durable copy", "remove `changelog`, or use `backend: rocksdb`")
        return self  # `dsn`/`table` are ignored by rocksdb, so `backend: ${VAR}` can switch a pipeline


class EventTimeSpec(Frozen):
    field: str | None = None  # None: the record timestamp
    allowed_lateness: Duration = 0.0
    idle_timeout: Duration = 10.0
    confidence: float = Field(1.0, gt=0.0, le=1.0)
    late: LatePolicy = "drop"


class DedupSpec(Frozen):
    """Drop input records whose id was already seen inside `window` of record time (stylus/core/dedup.py)."""

    window: Duration = Field(gt=0)
    # the producer-set id header (exactly-once outputs carry `stylus.id`: see Semantics.output_ids); records
    # without it, or all records when null, are identified by key + a hash of the value bytes
    header: str | None = Field("stylus.id", min_length=1)
    expected_ids: int = Field(100_000, ge=1, le=1_000_000_000)  # ids per partition per window: Bloom sizing
    fp_rate: float = Field(0.01, gt=0.0, lt=0.5)  # Bloom false positives (each costs an exact state lookup)


class AlertSpec(Frozen):
    """Thresholds for `stylus alerts` (Prometheus rules) and the status page."""

    lag_seconds: Duration = 60.0  # oldest unprocessed record older than this ...
    for_: Duration = Field(300.0, alias="for")  # ... for this long: page
    growing_for: Duration = 600.0  # lag in messages rising steadily this long: warn
    down_for: Duration = 60.0  # no running instance (or no scrape) this long: page
    checkpoint_stale: Duration | None = None  # no checkpoint for this long; default max(3 x interval, 1m)
    backup_stale: Duration | None = None  # no backup for this long; default 2 x backup interval + 1m
    dead_letters: bool = True  # warn when records go to the dead-letter topic


class ProcessorSpec(Frozen):
    class_: str | None = Field(None, alias="class", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    # an executable over stdin/stdout JSON lines instead of `class` (Swift; docs/executable.md), run in the
    # pipeline file's directory; the knobs below apply to it only
    command: tuple[str, ...] | None = Field(None, min_length=1)
    command_timeout: Duration = Field(30.0, gt=0)  # no answer for this long: the program is restarted
    command_window: int = Field(1000, ge=1, le=100_000)  # input lines written and not yet answered, at most
    command_attempts: int = Field(3, ge=1, le=100)  # crashes in a row on one record before `on_error` takes it
    # concurrent work inside an input partition (docs/acker.md): up to this many records of one partition worked
    # on at once (an `async def process`, or `ctx.defer`), tracked by an acker; input offsets are committed only
    # past records whose whole work is complete. None: one record at a time
    concurrency: int | None = Field(None, ge=1, le=10_000)
    work_timeout: Duration = Field(30.0, gt=0)  # a record's work not complete within this: the attempt fails
    work_attempts: int = Field(3, ge=1, le=100)  # attempts per record (timeouts, errors) before `on_error` takes it
    # a Puma-style SQL app instead of `class` (docs/sql.md): a file relative to the pipeline file; the loader
    # expands it into one `class:` processor per table it creates (stylus/sql/expand.py), inputs and outputs
    # from the app, so a loaded pipeline has no `sql` processor left
    sql: str | None = Field(None, min_length=1)
    # how a `sql:` app's stages run (docs/sql.md, "Batch compilation"): `auto`, on the columnar batch path where
    # that was measured faster; `always`, every stage that has a batch form (refused for one that has none);
    # `never`, per record. Decided when the app is expanded; its stages carry the default again
    batch: Literal["auto", "always", "never"] = "auto"
    inputs: tuple[str, ...] = Field((), min_length=1)  # required, except with `sql` (_class_or_command)
    # topic names, each written either alone or as `{topic: NAME, grouping: all|global|key}`
    # (stylus/config/groupings.py): the names stay here, the groupings go to `groupings`
    outputs: tuple[OutputName, ...] = ()
    # output topic -> Storm grouping other than the default (by key; shuffled without one): docs/groupings.md
    groupings: dict[str, Grouping] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    semantics: Semantics = Semantics(state="at_least_once", output="at_least_once")
    checkpoint: CheckpointSpec = CheckpointSpec()
    replicas: int = Field(1, ge=1, le=1000)
    state: StateSpec = StateSpec()
    event_time: EventTimeSpec | None = None
    on_error: ErrorPolicy = "dead_letter"
    dedup: DedupSpec | None = None
    # records per consume() at most; fewer when they are big (no more bytes than the prefetch: kafka/batching.py)
    batch_size: int = Field(2000, ge=1, le=100_000)
    kafka: KafkaSettings = Field(default_factory=dict)  # librdkafka overrides for this processor; secrets held
    alerts: AlertSpec = AlertSpec()
    # the `tables:` its `ctx.table(name)` reads, loaded and caught up before its first record (docs/tables.md);
    # None: any table that fits it, opened at its first lookup
    tables: tuple[str, ...] | None = None

    @property
    def stateful(self) -> bool:
        return self.semantics.state is not None

    @model_validator(mode="before")
    @classmethod
    def _split_groupings(cls, data: Any) -> Any:
        """`outputs: [words, {topic: control, grouping: all}]`: the groupings move to `groupings`, so
        `outputs` stays a tuple of topic names for everything that reads it."""
        return groupings_from(data)

    @model_validator(mode="after")
    def _groupings_name_outputs(self) -> ProcessorSpec:
        stray = sorted(set(self.groupings) - set(self.outputs))
        if stray:
            raise FixableError(f"`groupings` names {', '.join(stray)}, which is not among the processor's outputs",
                               "write the grouping on the output itself: "
                               "`outputs: [..., {topic: NAME, grouping: all}]`")
        return self

    @model_validator(mode="before")
    @classmethod
    def _command_is_stateless(cls, data: Any) -> Any:
        """A `command` processor without `semantics` is at-least-once and stateless, not the class default."""
        if isinstance(data, dict) and data.get("command") is not None and "semantics" not in data:
            return {**data, "semantics": {"output": "at_least_once"}}
        return data

    @model_validator(mode="after")
    def _class_or_command(self) -> ProcessorSpec:
        kinds = [k for k, v in (("class", self.class_), ("command", self.command), ("sql", self.sql)) if v is not None]
        if len(kinds) != 1:
            raise FixableError(
                "a processor names either `class` (a Python processor) or `command` (an executable over "
                "stdin/stdout JSON lines) or `sql` (a SQL app, docs/sql.md), "
                + (f"not both (this one has {' and '.join(f'`{k}`' for k in kinds)})" if kinds
                   else "and this one has neither"),
                "keep one of `class: module:Class`, `command: [./program, arg]` and `sql: app.sql`",
            )
        if self.batch != "auto" and self.sql is None:
            raise FixableError(f"`batch: {self.batch}` says how a SQL app's stages run; this processor is no "
                               "`sql:` one",
                               "remove `batch` (a Python processor takes the batch path by subclassing "
                               "`stylus.BatchProcessor`: docs/batch.md)")
        if self.sql is not None:
            from_app = [k for k in ("inputs", "outputs", "config") if getattr(self, k)]
            if from_app:
                raise FixableError(f"{', '.join(from_app)}: a SQL app's inputs, outputs and configuration come from "
                                   "its SQL (FROM KAFKA('topic'), CREATE TABLE name)", f"remove {', '.join(from_app)}")
        elif not self.inputs:
            raise FixableError("`inputs` is required", "add `inputs: [TOPIC, ...]` to the processor")
        if self.command is None:
            # by value, not by `model_fields_set`: a pipeline dumped and parsed again (a backfill's Spark tasks)
            # names every field
            knobs: list[str] = [k for k in ("command_timeout", "command_window", "command_attempts")
                                if getattr(self, k) != type(self).model_fields[k].default]
            knobs += [f"checkpoint.{k}" for k in ("records", "bytes") if getattr(self.checkpoint, k) is not None]
            if knobs:
                raise FixableError(f"{', '.join(knobs)} apply to `command` processors only",
                                   f"remove {', '.join(knobs)}, or use `command:` instead of `{kinds[0]}:`")
            return self
        if self.semantics.pair != (None, "at_least_once"):
            raise FixableError(
                f"a `command` processor is at-least-once and stateless (its answers are replayed from the last "
                f"commit after a restart); this one has (state={self.semantics.state}, "
                f"output={self.semantics.output})",
                "use `semantics: {output: at_least_once}`, or write the processor as a Python `class`",
            )
        unused = [k for k in ("event_time", "dedup") if getattr(self, k) is not None]
        unused += [f"state.{k}" for k in ("backup", "changelog") if getattr(self.state, k)]
        if unused:
            raise FixableError(f"{', '.join(unused)} need(s) a Python processor; a `command` processor has no "
                               "state nor timers", f"remove {', '.join(unused)}")
        return self

    @model_validator(mode="after")
    def _concurrency_honourable(self) -> ProcessorSpec:
        """`concurrency` commits an input offset only past records whose work is complete, and records complete
        out of order: after a crash, the records that completed past the oldest incomplete one are processed
        again. Their outputs and state changes repeat, so only at-least-once output and state can be promised
        (docs/acker.md, "Which semantics")."""
        if self.concurrency is None:
            defaults = type(self).model_fields
            knobs = [k for k in ("work_timeout", "work_attempts") if getattr(self, k) != defaults[k].default]
            if knobs:
                raise FixableError(f"{', '.join(knobs)} apply to concurrent work only",
                                   f"add `concurrency: N` (records of a partition worked on at once), or remove "
                                   f"{', '.join(knobs)}")
            return self
        if self.command is not None:
            raise FixableError("`concurrency` applies to Python processors; a `command` processor pipelines its "
                               "records with `command_window`", "remove `concurrency`, or set `command_window`")
        if getattr(self, "sql", None) is not None:
            raise FixableError("`concurrency` applies to Python processors whose `process` awaits slow I/O; a SQL "
                               "app's processors do not", "remove `concurrency`")
        if self.semantics.pair not in ((None, "at_least_once"), ("at_least_once", "at_least_once")):
            raise FixableError(
                f"`concurrency` cannot honour (state={self.semantics.state}, output={self.semantics.output}): records "
                "complete out of order and input offsets are committed only up to the oldest record still in flight, "
                "so after a crash the records that had completed past it are processed again; their outputs and "
                "state changes repeat, which only at-least-once output and state allow",
                "use `semantics: {state: at_least_once, output: at_least_once}` (or `{output: at_least_once}` when "
                "stateless), or remove `concurrency`")
        unsupported = {
            "event_time": "the watermark would pass records still in flight, judging them late and closing their "
                          "windows without them",
            "dedup": "ids are remembered in offset order as records finish, and records finish out of order",
        }
        for key, why in unsupported.items():
            if getattr(self, key) is not None:
                raise FixableError(f"`{key}` cannot be combined with `concurrency`: {why}",
                                   f"remove `{key}`, or remove `concurrency`")
        if self.state.backend != "rocksdb":
            raise FixableError(f"`concurrency` needs the rocksdb state backend, not `{self.state.backend}`",
                               "use `backend: rocksdb`, or remove `concurrency`")
        return self

    @model_validator(mode="after")
    def _dedup_needs_local_state(self) -> ProcessorSpec:
        if self.dedup is not None and (self.semantics.state is None or self.state.backend != "rocksdb"):
            raise FixableError(
                "`dedup` keeps the ids it has seen in the processor's local state (so they follow its state "
                "semantics): it needs `semantics.state` and the rocksdb state backend",
                "add `state: exactly_once` (or at_least_once / at_most_once) under `semantics`, "
                "or remove `dedup`",
            )
        return self

    @model_validator(mode="after")
    def _remote_state_semantics(self) -> ProcessorSpec:
        remote = self.state.backend == "postgres"
        if remote and (self.semantics.state is None or self.semantics.output == "exactly_once"):
            raise FixableError(
                "state backend `postgres` commits state and offsets in a database transaction, which cannot "
                "also be a Kafka transaction: it needs stateful semantics with output at_least_once or at_most_once",
                "use `semantics: {state: exactly_once, output: at_least_once}` (or output: at_most_once)",
            )
        return self

    @model_validator(mode="after")
    def _changelog_in_the_transaction(self) -> ProcessorSpec:
        if not self.state.changelog:
            return self
        if self.semantics.state is None:
            raise FixableError(
                "`state.changelog` records changes of the processor's state, and this processor is stateless",
                "remove `changelog` under `state`, or use `semantics: {state: exactly_once, output: exactly_once}`",
            )
        if self.semantics.pair != ("exactly_once", "exactly_once"):
            raise FixableError(
                f"`state.changelog` needs exactly-once state and output; this processor has "
                f"(state={self.semantics.state}, output={self.semantics.output})",
                "use `semantics: {state: exactly_once, output: exactly_once}` (the changelog is written inside the "
                "Kafka transaction that commits the outputs and input offsets, so it matches them exactly), "
                "or remove `changelog` under `state`",
            )
        return self


class TableSpec(Frozen):
    """A topic materialised as a key-value table (Laser; docs/tables.md): the latest value per key."""

    topic: str
    # `global`: every instance holds all of it; `partitioned`: an instance holds the partitions matching its
    # input partitions (the table's topic is co-partitioned with the processor's inputs)
    placement: Literal["partitioned", "global"] = "global"
    # the value field (Parquet: column) that holds the key, for records without a Kafka key and for bulk loads
    key: str | None = Field(None, min_length=1)
    # the value fields kept (a projection); None: the whole value
    value: tuple[str, ...] | None = Field(None, min_length=1)
    # an entry older than this (its record's timestamp against the looking-up record's, or the wall clock when
    # served) reads as absent
    ttl: Duration | None = Field(None, gt=0)
    # Parquet file or directory loaded in bulk before the topic (a warehouse snapshot), relative to the YAML
    parquet: str | None = Field(None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _one_field_value(cls, data: Any) -> Any:
        """`value: name` is `value: [name]`."""
        if isinstance(data, dict) and isinstance(data.get("value"), str):
            return {**data, "value": [data["value"]]}
        return data


class Pipeline(Frozen):
    pipeline: str = Field(pattern=NAME_PATTERN)
    kafka: KafkaSettings = Field(default_factory=dict)  # secrets held as Secret (stylus/config/secrets.py)
    topics: dict[str, TopicSpec] = Field(min_length=1)
    processors: dict[str, ProcessorSpec] = Field(min_length=1)
    tables: dict[str, TableSpec] = Field(default_factory=dict)  # docs/tables.md
    source: str = Field("<memory>", exclude=True)

    def processor(self, name: str) -> ProcessorSpec:
        return self.processors[name]

    def group_id(self, processor: str) -> str:
        return f"{self.pipeline}.{processor}"

    def dlq_topic(self, processor: str) -> str:
        return f"{self.pipeline}.{processor}.dlq"

    def changelog_topic(self, processor: str, input_topic: str) -> str:
        """The compacted topic holding the state changes of `processor`'s partitions of `input_topic`
        (`state.changelog`): partition p of it belongs to partition p of the input."""
        return f"{self.pipeline}.{processor}.{input_topic}.changelog"

    def producers_of(self, topic: str) -> list[str]:
        return [n for n, p in self.processors.items() if topic in p.outputs]

    def consumers_of(self, topic: str) -> list[str]:
        return [n for n, p in self.processors.items() if topic in p.inputs]

    def upstream_of(self, processor: str) -> list[str]:
        spec = self.processors[processor]
        return sorted({u for t in spec.inputs for u in self.producers_of(t)})

    def topological_order(self) -> list[str]:
        """Processors sorted so every producer comes before its consumers (the DAG is acyclic)."""
        order: list[str] = []
        seen: set[str] = set()

        def visit(name: str) -> None:
            if name in seen:
                return
            seen.add(name)
            for upstream in self.upstream_of(name):
                visit(upstream)
            order.append(name)

        for name in self.processors:
            visit(name)
        return order
