"""Issue 4 benchmark: monoid remote state (deltas merged per checkpoint) against a read-modify-write-per-record
PostgreSQL processor, on the same input, both with exactly-once state (state + offsets in one transaction).

    .venv/bin/python -m bench.monoid --records 200000 --keys 10000 --checkpoint 2000

Input: RawMessages over 4 partitions (no broker: the database is what is measured), counted through the
real Engine. Contenders:
- rmw: per record `SELECT .. FOR UPDATE` then an upsert (2 round trips), one transaction per checkpoint
  with the offsets (the kindest form of read-modify-write: no per-record commit);
- monoid-sql: processors.counters-style CountMonoid, merged entirely in SQL;
- monoid-python: the same count with the Python combine path (lock touched keys, combine, write back).
Round trips are counted by stylus.monoid.pg.Db (every statement, BEGIN, COMMIT). Each run gets a fresh
database; the final tables are checked against the truth.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stylus.api import Context, Processor, Record  # noqa: E402
from stylus.config import parse_pipeline  # noqa: E402
from stylus.core import CollectingSink, Engine, PartitionTask, RaiseFailures, RawMessage  # noqa: E402
from stylus.monoid import CountMonoid, MonoidProcessor  # noqa: E402
from stylus.monoid.backend import PostgresBackend, RemotePartitionStore  # noqa: E402
from stylus.monoid.pg import Db  # noqa: E402

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PARTITIONS = 4
TOPIC = "events"


class SqlCount(CountMonoid):
    pass


class PyCount(MonoidProcessor):
    def zero(self) -> Any:
        return 0

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def map(self, record: Record) -> Iterable[tuple[str, Any]]:
        return ((record.key or "", 1),)


class RmwCount(Processor):
    """Read-modify-write per record against the table (the connection is set by the driver)."""

    db: Db

    def process(self, record: Record, ctx: Context) -> None:
        key = record.key or ""
        row = self.db.execute("SELECT value FROM rmw WHERE key = %s FOR UPDATE", (key,)).fetchone()
        value = 1 if row is None else row[0] + 1
        self.db.execute("INSERT INTO rmw (key, value) VALUES (%s, %s::jsonb) ON CONFLICT (key) DO UPDATE "
                        "SET value = EXCLUDED.value", (key, orjson.dumps(value).decode()))


def make_input(records: int, keys: int, seed: int = 1) -> list[RawMessage]:
    rng = random.Random(seed)
    offsets = [0] * PARTITIONS
    out = []
    for _ in range(records):
        key = f"k{rng.randrange(keys)}"
        partition = zlib.crc32(key.encode()) % PARTITIONS
        out.append(RawMessage(TOPIC, partition, offsets[partition], key.encode(), b"{}", 0))
        offsets[partition] += 1
    return out


def pipeline_for(cls: str, dsn: str, backend: str) -> Any:
    state: dict[str, Any] = {"backend": backend}
    if backend == "postgres":
        state["dsn"] = dsn
    doc = {"pipeline": "bench-monoid", "topics": {TOPIC: {"partitions": PARTITIONS}},
           "processors": {"agg": {"class": cls, "inputs": [TOPIC], "state": state,
                                  "semantics": {"state": "exactly_once", "output": "at_least_once"}}}}
    return parse_pipeline(yaml.safe_dump(doc))


def engine_for(processor: Processor, pipeline: Any) -> Engine:
    spec = pipeline.processors["agg"]
    engine = Engine(processor, "agg", spec, pipeline, CollectingSink(spec.outputs), RaiseFailures())
    engine.start()
    return engine


def run_monoid(dsn: str, cls: type[MonoidProcessor], msgs: list[RawMessage], every: int) -> dict[str, Any]:
    name = f"bench.monoid:{cls.__name__}"
    pipeline = pipeline_for(name, dsn, "postgres")
    processor = cls(name="agg")
    backend = PostgresBackend(pipeline, "agg", processor)
    tasks = {(TOPIC, p): PartitionTask(TOPIC, p, backend.open(TOPIC, p)) for p in range(PARTITIONS)}
    engine = engine_for(processor, pipeline)
    assert backend.db is not None
    db = backend.db
    db.round_trips = 0
    started = time.perf_counter()
    for start in range(0, len(msgs), every):
        engine.process_messages(msgs[start:start + every], lambda t, p: tasks[(t, p)])
        for task in tasks.values():  # the worker's STATE_AND_OFFSETS step
            assert task.store is not None
            task.store.save(task.next_offset, state=True)
    seconds = time.perf_counter() - started
    trips = db.round_trips
    store = next(iter(tasks.values())).store
    assert isinstance(store, RemotePartitionStore)
    table = dict(db.execute(f'SELECT key, value FROM "{store.table.name}"').fetchall())
    for task in tasks.values():
        assert task.store is not None
        task.store.close()
    return {"seconds": seconds, "round_trips": trips, "table": table}


def run_rmw(dsn: str, msgs: list[RawMessage], every: int) -> dict[str, Any]:
    pipeline = pipeline_for("bench.monoid:RmwCount", dsn, "rocksdb")
    db = Db(dsn)
    db.execute("CREATE TABLE rmw (key text PRIMARY KEY, value jsonb NOT NULL)")
    db.execute("CREATE TABLE rmw_offsets (topic text, partition int, next_offset bigint,"
               " PRIMARY KEY (topic, partition))")
    processor = RmwCount(name="agg")
    processor.db = db
    engine = engine_for(processor, pipeline)
    tasks = {(TOPIC, p): PartitionTask(TOPIC, p, None) for p in range(PARTITIONS)}
    db.round_trips = 0
    started = time.perf_counter()
    for start in range(0, len(msgs), every):
        with db.transaction():
            engine.process_messages(msgs[start:start + every], lambda t, p: tasks[(t, p)])
            for task in tasks.values():
                if task.next_offset is not None:
                    db.execute("INSERT INTO rmw_offsets VALUES (%s, %s, %s) ON CONFLICT (topic, partition) DO UPDATE"
                               " SET next_offset = EXCLUDED.next_offset", (TOPIC, task.partition, task.next_offset))
    seconds = time.perf_counter() - started
    trips = db.round_trips
    table = dict(db.execute("SELECT key, value FROM rmw").fetchall())
    db.close()
    return {"seconds": seconds, "round_trips": trips, "table": table}


def fresh_database() -> tuple[str, str]:
    name = f"stylus_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"postgresql://postgres@127.0.0.1:5432/{name}"


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--checkpoint", type=int, default=2000, help="records between checkpoints")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    msgs = make_input(args.records, args.keys)
    truth = dict(Counter(m.key().decode() for m in msgs))  # type: ignore[union-attr]
    contenders = {
        "rmw": lambda dsn: run_rmw(dsn, msgs, args.checkpoint),
        "monoid-sql": lambda dsn: run_monoid(dsn, SqlCount, msgs, args.checkpoint),
        "monoid-python": lambda dsn: run_monoid(dsn, PyCount, msgs, args.checkpoint),
    }
    results: dict[str, dict[str, Any]] = {}
    for label, run in contenders.items():
        name, dsn = fresh_database()
        try:
            result = run(dsn)
        finally:
            drop_database(name)
        if result.pop("table") != truth:
            raise SystemExit(f"{label}: final table differs from the truth")
        result["records_per_s"] = args.records / result["seconds"]
        results[label] = result
    base = results["rmw"]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.records} records, {args.keys} keys, {PARTITIONS} partitions, checkpoint every "
          f"{args.checkpoint} records; tables checked against the truth")
    print(f"{'contender':<14} {'seconds':>8} {'records/s':>10} {'round trips':>12} {'fewer trips':>12} {'speed-up':>9}")
    for label, r in results.items():
        print(f"{label:<14} {r['seconds']:>8.2f} {r['records_per_s']:>10,.0f} {r['round_trips']:>12,} "
              f"{base['round_trips'] / r['round_trips']:>11.1f}x {r['records_per_s'] / base['records_per_s']:>8.1f}x")


if __name__ == "__main__":
    main()
