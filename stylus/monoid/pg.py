"""PostgreSQL remote state for monoid processors: one table per processor (key text, value jsonb) and a
shared offsets table; each checkpoint of an input partition is ONE transaction that

1. fences: moves the partition's `next_offset` from the value this owner read to the new one (a
   zombie owner whose offsets moved on fails here and its transaction writes nothing);
2. merges the pending deltas of only the touched keys: entirely in SQL for the built-in combiners
   (one INSERT .. ON CONFLICT DO UPDATE), or by locking those keys (SELECT .. FOR UPDATE, in key order),
   combining in Python and writing back in one set-based statement;
3. commits. State and offsets can therefore never disagree (exactly-once state).

Batches travel as two parallel text arrays through `unnest` (one round trip, binary-safe), which is
the set-based upsert the COPY-into-temp-table route would give, minus the temp table's extra trips.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import psycopg
from psycopg import errors, sql
from psycopg.types.json import set_json_loads

from stylus.monoid.processor import SqlCombiner
from stylus.monoid.state import MISSING
from stylus.state.ownership import OwnershipLost

log = logging.getLogger(__name__)

OFFSETS_TABLE = "stylus_monoid_offsets"
MAX_ATTEMPTS = 8  # deadlocks between partitions merging overlapping keys are retried
RETRY_PAUSE = 0.02  # seconds, times the attempt: the bound of the random pause before a retry

_SQL_MERGE: dict[str, str] = {
    "sum": "to_jsonb(t.value::numeric + EXCLUDED.value::numeric)",
    "count": "to_jsonb(t.value::bigint + EXCLUDED.value::bigint)",
    "max": "CASE WHEN t.value = 'null'::jsonb THEN EXCLUDED.value WHEN EXCLUDED.value = 'null'::jsonb THEN t.value"
           " WHEN EXCLUDED.value > t.value THEN EXCLUDED.value ELSE t.value END",
    "min": "CASE WHEN t.value = 'null'::jsonb THEN EXCLUDED.value WHEN EXCLUDED.value = 'null'::jsonb THEN t.value"
           " WHEN EXCLUDED.value < t.value THEN EXCLUDED.value ELSE t.value END",
}


class StaleOwner(OwnershipLost):
    """Another owner advanced this partition's offsets since we read them: our checkpoint is refused."""


def default_table(pipeline: str, processor: str) -> str:
    """`stylus_<pipeline>_<processor>` made a safe identifier, with a hash so distinct names never collide."""
    slug = re.sub(r"[^a-z0-9_]", "_", f"{pipeline}_{processor}".lower())[:45]
    digest = hashlib.sha1(f"{pipeline}/{processor}".encode()).hexdigest()[:8]
    return f"stylus_{slug}_{digest}"


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


class Db:
    """An autocommit connection that counts database round trips (every statement, BEGIN and COMMIT):
    the number the benchmark compares."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        set_json_loads(orjson.loads, self.conn)
        self.round_trips = 0

    def execute(self, query: sql.Composable | str, params: Sequence[Any] | None = None) -> psycopg.Cursor[Any]:
        self.round_trips += 1
        return self.conn.execute(query, params)  # type: ignore[arg-type]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.round_trips += 2  # BEGIN, COMMIT (or ROLLBACK)
        with self.conn.transaction():
            yield

    def close(self) -> None:
        self.conn.close()


class MonoidTable:
    """One processor's state table plus its rows in the offsets table."""

    def __init__(
        self,
        db: Db,
        table: str,
        zero: Callable[[], Any],
        combine: Callable[[Any, Any], Any],
        sql_combiner: SqlCombiner | None = None,
    ) -> None:
        self.db = db
        self.name = table
        self.zero = zero
        self.combine = combine
        self.sql_combiner = sql_combiner
        self.rows_read = 0  # stored values read by merges: the touched keys only, never the whole state
        t = sql.Identifier(table)
        o = sql.Identifier(OFFSETS_TABLE)
        self._q_read = sql.SQL("SELECT value FROM {} WHERE key = %s").format(t)
        self._q_scan = sql.SQL("SELECT key, value FROM {} ORDER BY key").format(t)
        self._q_lock = sql.SQL("SELECT key, value FROM {} WHERE key = ANY(%s) ORDER BY key FOR UPDATE").format(t)
        self._q_insert_new = sql.SQL(
            "INSERT INTO {} (key, value) SELECT k, v::jsonb FROM unnest(%s::text[], %s::text[]) AS d(k, v)"
            " ORDER BY k ON CONFLICT (key) DO NOTHING RETURNING key"
        ).format(t)
        self._q_update = sql.SQL(
            "UPDATE {} AS t SET value = d.v::jsonb FROM unnest(%s::text[], %s::text[]) AS d(k, v) WHERE t.key = d.k"
        ).format(t)
        self._q_merge_sql = (
            sql.SQL(
                "INSERT INTO {} AS t (key, value) SELECT k, v::jsonb FROM unnest(%s::text[], %s::text[]) AS d(k, v)"
                " ORDER BY k ON CONFLICT (key) DO UPDATE SET value = "
            ).format(t) + sql.SQL(_SQL_MERGE[sql_combiner])
            if sql_combiner is not None else None
        )
        self._q_fence = sql.SQL(
            "INSERT INTO {} AS o (consumer_group, topic, partition, next_offset) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (consumer_group, topic, partition) DO UPDATE"
            " SET next_offset = EXCLUDED.next_offset, updated_at = now()"
            " WHERE o.next_offset IS NOT DISTINCT FROM %s RETURNING 1"
        ).format(o)
        self._q_offset = sql.SQL(
            "SELECT next_offset FROM {} WHERE consumer_group = %s AND topic = %s AND partition = %s"
        ).format(o)

    # ------------------------------------------------------------------ schema
    def create(self) -> None:
        """Create the state and offsets tables if missing (serialised by an advisory lock, since concurrent
        CREATE TABLE IF NOT EXISTS can still collide)."""
        with self.db.transaction():
            self.db.execute("SELECT pg_advisory_xact_lock(hashtext('stylus_monoid_schema'))")
            self.db.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (consumer_group text NOT NULL, topic text NOT NULL,"
                " partition integer NOT NULL, next_offset bigint, updated_at timestamptz NOT NULL DEFAULT now(),"
                " PRIMARY KEY (consumer_group, topic, partition))"
            ).format(sql.Identifier(OFFSETS_TABLE)))
            self.db.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value jsonb NOT NULL)")
                            .format(sql.Identifier(self.name)))

    # ------------------------------------------------------------------ reads
    def read(self, key: str) -> Any:
        row = self.db.execute(self._q_read, (key,)).fetchone()
        return MISSING if row is None else row[0]

    def scan(self) -> Iterator[tuple[str, Any]]:
        """Every stored value, streamed by a server-side cursor (only when user code asks for it)."""
        with self.db.transaction(), self.db.conn.cursor(name="stylus_monoid_scan") as cur:
            cur.itersize = 5000
            cur.execute(self._q_scan)
            yield from cur

    def stored_offset(self, group: str, topic: str, partition: int) -> int | None:
        row = self.db.execute(self._q_offset, (group, topic, partition)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # ------------------------------------------------------------------ the checkpoint
    def save(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        expected: int | None,
        offset: int | None,
        deltas: dict[str, Any],
    ) -> None:
        """Merge `deltas` and move the offset from `expected` to `offset`, atomically. Raises StaleOwner."""
        keys = sorted(deltas)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                with self.db.transaction():
                    fenced = self.db.execute(self._q_fence, (group, topic, partition, offset, expected)).fetchone()
                    if fenced is None:
                        raise StaleOwner(
                            f"{group} {topic}[{partition}]: offsets moved past {expected} in the database; "
                            "another instance owns this partition now"
                        )
                    if keys:
                        if self._q_merge_sql is not None:
                            self._merge_in_sql(keys, deltas)
                        else:
                            self._merge_in_python(keys, deltas)
                return
            except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
                if attempt == MAX_ATTEMPTS:
                    raise
                log.warning("%s: %s on merge, retrying (%d/%d)", self.name, type(exc).__name__, attempt,
                            MAX_ATTEMPTS)
                # a random pause: retried at once, the same partitions met in the same order again (5 deadlocks
                # in a row under load), where one of them a little ahead takes all its keys first
                time.sleep(random.uniform(0, RETRY_PAUSE * attempt))

    def _merge_in_sql(self, keys: list[str], deltas: dict[str, Any]) -> None:
        assert self._q_merge_sql is not None
        self.db.execute(self._q_merge_sql, (keys, [_dumps(deltas[k]) for k in keys]))

    def _merge_in_python(self, keys: list[str], deltas: dict[str, Any]) -> None:
        combine, zero = self.combine, self.zero
        stored = dict(self.db.execute(self._q_lock, (keys,)).fetchall())
        self.rows_read += len(stored)
        update_keys: list[str] = []
        update_values: list[str] = []
        new_keys: list[str] = []
        new_values: list[str] = []
        for key in keys:
            value = stored.get(key, MISSING)
            if value is MISSING:
                new_keys.append(key)
                new_values.append(_dumps(combine(zero(), deltas[key])))
            else:
                update_keys.append(key)
                update_values.append(_dumps(combine(value, deltas[key])))
        if new_keys:
            inserted = {row[0] for row in self.db.execute(self._q_insert_new, (new_keys, new_values)).fetchall()}
            raced = [k for k in new_keys if k not in inserted]  # inserted by another partition meanwhile
            if raced:
                for key, value in self.db.execute(self._q_lock, (raced,)).fetchall():
                    self.rows_read += 1
                    update_keys.append(key)
                    update_values.append(_dumps(combine(value, deltas[key])))
        if update_keys:
            self.db.execute(self._q_update, (update_keys, update_values))
