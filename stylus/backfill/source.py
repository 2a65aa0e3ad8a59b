"""The `kafka-source` reader: a unit's Kafka ranges read by Spark's own Kafka source (`spark.read.format("kafka")`,
jars from `jvm/spark/pom.xml`), then the processor's own code over them, one Spark task per unit.

The other reader (`client`, the default: `stylus.backfill.read`) has each task read its units with confluent-kafka.
Both hand the same records, in offset order, to the same `UnitRun` (the stream's `Engine`); they differ in who
fetches and decodes the Kafka records: here the executor's JVM (the Java client, `read_committed`, Spark's
rows), then an Arrow batch per 20,000 records into the task's Python worker, made into `RawMessage`s there.

Ranges are by offset, not by count: with `read_committed` the offsets of transaction markers and of aborted
records are gaps, which the source skips as the client reader does. A read of the source takes at most one range
per partition, so units of the same partition (chunks of a stateless processor) go into separate reads, unioned
("layers"); a Spark partition of the result is one unit's range, read in offset order. A unit whose range holds
no visible record (only markers and aborted records, nothing within the time bounds, or no range at all) gets no
rows and so no Spark task that knows it: the driver runs it itself, with no records (`run_empty_units`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Generator, Iterable, Iterator
from itertools import pairwise, repeat
from typing import Any, Literal

import pyarrow as pa

from stylus.backfill.plan import Plan, Unit
from stylus.backfill.task import JobSpec, UnitRun, rows_batches
from stylus.core.message import RawMessage
from stylus.kafka.batching import DEFAULT_QUEUED_KBYTES, BatchSizer
from stylus.kafka.settings import connect

#: The readers of a backfill's Kafka ranges (`stylus.backfill.job.run_plan(reader=...)`)
Reader = Literal["client", "kafka-source"]
#: The source's rows as the task reads them: the timestamp in epoch ms, as Kafka has it, and empty lists, not nulls,
#: for records without headers. Spark's Arrow writer measures its batch after every row (`maxBytesPerBatch`), and
#: for a list column each measure costs O(rows since the last non-null list) (Arrow's ListVector.setValueCount
#: fills the holes again: jstack samples), so a 20,000-row batch of records without headers was quadratic: in warm
#: 100,000-record backfills the JVM took 78-88 us of CPU per record, and 14-16 us with empty lists.
COLUMNS = ("topic", "partition", "offset", "unix_millis(timestamp) AS timestamp", "key", "value",
           "coalesce(headers, array()) AS headers")
#: A range of one layer: (topic, partition) -> (start, end, unit index)
Layer = dict[tuple[str, int], tuple[int, int, int]]


class ReaderError(ValueError):
    """A plan or a connection setting this reader cannot serve (the message says what to use instead)."""


def kafka_range(unit: Unit) -> tuple[int, int] | None:
    """The unit's offsets [start, end) in Kafka (None: no Kafka chunk). Only Kafka: the archive is read by the
    client reader, which merges both sources in offset order."""
    if any(chunk.source != "kafka" for chunk in unit.chunks):
        raise ReaderError(f"reader `kafka-source` reads Kafka only, but unit {unit.index} ({unit.topic}"
                          f"[{unit.partition}]) has archive files; use reader `client` with --source archive|both")
    if not unit.chunks:
        return None
    for before, after in pairwise(unit.chunks):
        if after.start != before.end:  # the plan makes a unit's Kafka chunks contiguous; a gap would be a bug
            raise ReaderError(f"unit {unit.index}: Kafka chunks {before.end} and {after.start} are not contiguous")
    return unit.chunks[0].start, unit.chunks[-1].end


def layers(plan: Plan) -> list[Layer]:
    """The units' ranges in as few reads as possible: one read takes one range per partition."""
    out: list[Layer] = []
    for unit in plan.units:
        span = kafka_range(unit)
        if span is None or span[1] <= span[0]:
            continue
        key = (unit.topic, unit.partition)
        layer = next((layer for layer in out if key not in layer), None)
        if layer is None:
            layer = {}
            out.append(layer)
        layer[key] = (span[0], span[1], unit.index)
    return out


def read_options(bootstrap: str, layer: Layer) -> dict[str, str]:
    """The source's options for one layer: exactly these partitions (`assign`), each from its start to its end
    (exclusive), with the records' headers (the engine tells upstream control records by them) and committed
    records only. The pipeline's connection settings go to the Java client (`java_connection`)."""
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for (topic, partition), (start, end, _) in sorted(layer.items()):
        assign.setdefault(topic, []).append(partition)
        starts.setdefault(topic, {})[str(partition)] = start
        ends.setdefault(topic, {})[str(partition)] = end
    options = {f"kafka.{k}": v for k, v in java_connection(bootstrap).items()}
    options.update({
        "kafka.bootstrap.servers": bootstrap,
        "kafka.isolation.level": "read_committed",
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(starts),
        "endingOffsets": json.dumps(ends),
        "includeHeaders": "true",
        "failOnDataLoss": "true",  # a range Kafka no longer holds fails the backfill, never skips records
    })
    return options


#: librdkafka connection settings the Java client takes under the same name and meaning
_SAME_IN_JAVA = ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm",
                 "sasl.kerberos.service.name", "client.rack")
_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def java_connection(bootstrap: str) -> dict[str, str]:
    """The cluster's connection settings (the pipeline's and the profile's SASL/SSL, librdkafka names) for the
    Java client: same names where they mean the same, a JAAS line for SASL PLAIN/SCRAM user and password, a PEM
    truststore for `ssl.ca.location`. Anything else is refused, naming the setting: a silently dropped security
    setting would only show as a connection that hangs in the executors."""
    given = {k: str(v) for k, v in connect(bootstrap).items() if k != "bootstrap.servers"}
    if "sasl.mechanisms" in given:
        given.setdefault("sasl.mechanism", given.pop("sasl.mechanisms"))
    out: dict[str, str] = {}
    user, password = given.pop("sasl.username", None), given.pop("sasl.password", None)
    if user is not None or password is not None:
        mechanism = given.get("sasl.mechanism", "PLAIN").upper()
        module = _JAAS_MODULES.get(mechanism)
        if module is None or user is None or password is None:
            raise ReaderError(f"reader `kafka-source`: SASL {mechanism} with sasl.username/password has no Java "
                              "equivalent here; set sasl.jaas.config or use reader `client`")
        out["sasl.jaas.config"] = f'{module} required username="{_jaas(user)}" password="{_jaas(password)}";'
    if "ssl.ca.location" in given:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = given.pop("ssl.ca.location")
    for key, value in given.items():
        if key in _SAME_IN_JAVA:
            out[key] = value.upper() if key in ("security.protocol", "sasl.mechanism") else value
        elif key == "sasl.jaas.config":
            out[key] = value
        else:
            raise ReaderError(f"reader `kafka-source`: the connection setting `{key}` (librdkafka) has no known Java "
                              "client equivalent; use reader `client`")
    return out


def _jaas(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def source_frame(spark: Any, plan: Plan, job_json: str, result_ddl: str) -> Any | None:
    """A DataFrame of the result rows (`RESULT_DDL`) of every unit with records: the source's layers, unioned,
    each Spark partition (one unit's range) run by `run_partition`. None when no unit has a Kafka range."""
    from stylus.kafka.jars import jar_dir

    jar_dir("spark")  # a clear error (run `make install`) when the source's jars were never resolved
    parts = layers(plan)
    if not parts:
        return None
    frame: Any = None
    for layer in parts:
        reader = spark.read.format("kafka")
        for key, value in read_options(plan.bootstrap, layer).items():
            reader = reader.option(key, value)
        read = reader.load()
        units = {plan.units[index] for _, _, index in layer.values()}
        low = {u.min_ts for u in units} - {None}
        high = {u.max_ts for u in units} - {None}
        if len(low) > 1 or len(high) > 1:  # one backfill has one pair of bounds; never mix them silently
            raise ReaderError("units of one backfill have different time bounds")
        read = read.selectExpr(*COLUMNS)
        if low:
            read = read.where(f"timestamp >= {low.pop()}")
        if high:
            read = read.where(f"timestamp < {high.pop()}")
        frame = read if frame is None else frame.unionAll(read)
    ranges = [(topic, partition, start, end, index)
              for layer in parts for (topic, partition), (start, end, index) in layer.items()]
    units_json = {index: plan.units[index].model_dump_json() for *_, index in ranges}
    return frame.mapInArrow(functools.partial(run_partition, job_json, units_json, ranges), result_ddl)


def run_partition(job_json: str, units_json: dict[int, str], ranges: list[tuple[str, int, int, int, int]],
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: one Spark partition is one unit's range, in offset order. The unit is the one whose
    range holds the first row; its records go to `UnitRun` as the client reader's would."""
    batches = (b for b in batches if b.num_rows)
    first = next(batches, None)
    if first is None:
        return  # no visible record: the driver runs the unit (run_empty_units)
    topic, partition, offset = (first.column(i)[0].as_py() for i in range(3))
    index = next((i for t, p, start, end, i in ranges if (t, p) == (topic, partition) and start <= offset < end),
                 None)
    if index is None:
        raise RuntimeError(f"{topic}[{partition}]@{offset} is in no planned range")
    job = JobSpec.model_validate_json(job_json)
    unit = Unit.model_validate_json(units_json[index])
    end = next(e for t, p, _, e, i in ranges if i == index)
    run = UnitRun(job, unit, records=functools.partial(messages, _chain(first, batches), end), reader="kafka-source")
    yield from rows_batches(run.rows())
    run.output.wait()  # before the task ends: a delivery failure fails it (and Spark retries it)


def _chain(first: pa.RecordBatch, rest: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def messages(batches: Iterable[pa.RecordBatch], end: int, size: int) -> Iterator[list[RawMessage]]:
    """The rows as the engine's messages, in lists of at most `size`, and fewer when records are big (the client
    reader's bound, `BatchSizer`). Column by column, with the topic and partition (one per Spark partition) and
    absent headers repeated rather than converted per row. Checks that offsets rise and stay below `end`."""
    sizer = BatchSizer(size, DEFAULT_QUEUED_KBYTES * 1024)
    pending: list[RawMessage] = []
    last = -1
    for batch in batches:
        offsets = batch.column(2).to_pylist()
        if offsets[0] <= last or offsets[-1] >= end:
            raise RuntimeError(f"offsets out of order or past the range: {last} then {offsets[0]}..{offsets[-1]}")
        last = offsets[-1]
        pending.extend(map(RawMessage, repeat(batch.column(0)[0].as_py()), repeat(batch.column(1)[0].as_py()),
                           offsets, batch.column(4).to_pylist(), batch.column(5).to_pylist(),
                           batch.column(3).to_pylist(), _headers(batch.column(6))))
        pending = yield from _lists(pending, sizer, whole_only=True)
    yield from _lists(pending, sizer, whole_only=False)


def _lists(pending: list[RawMessage], sizer: BatchSizer, *,
           whole_only: bool) -> Generator[list[RawMessage], None, list[RawMessage]]:
    """Lists of `sizer.size` from the front of `pending` (and the rest too unless `whole_only`); returns what
    is left."""
    pos = 0
    while len(pending) - pos >= sizer.size or (not whole_only and pos < len(pending)):
        part = pending[pos:pos + sizer.size]
        pos += len(part)
        sizer.observe(part)
        yield part
    return pending[pos:]


def _headers(column: pa.Array) -> Iterable[list[tuple[str, bytes]] | None]:
    """Per row, the headers as confluent-kafka gives them (None for none); not converted per row when the batch
    has none at all (no header in any of its lists: the usual case)."""
    if column.null_count == len(column) or len(column.flatten()) == 0:
        return repeat(None)
    return [[(h["key"], h["value"]) for h in hs] if hs else None for hs in column.to_pylist()]


def run_empty_units(job: JobSpec, plan: Plan, done: set[int]) -> list[tuple[Any, ...]]:
    """The result rows of the units no Spark task ran (no visible record in their range), run here with no
    records: a unit still reports its next offset, and its (empty) state is seeded like any other."""
    rows: list[tuple[Any, ...]] = []
    for unit in plan.units:
        if unit.index in done:
            continue
        run = UnitRun(job, unit, records=lambda _size: iter(()), reader="kafka-source")
        rows.extend(run.rows())
        run.output.wait()
    return rows
