"""`--seed-state`: write a backfill's final state as the processor's live RocksDB state, one database
per input partition at `{state.dir}/{pipeline}/{processor}/{topic}-{partition}` holding the state
keys, timers and the next input offset, so a new processor continues on the stream from there."""

from __future__ import annotations

from pathlib import Path

from stylus.config.model import Pipeline
from stylus.config.secrets import reveal
from stylus.state.kv import RocksKV


class StateExists(RuntimeError):
    pass


def state_path(pipeline: Pipeline, processor: str, topic: str, partition: int) -> Path:
    spec = pipeline.processors[processor]
    return Path(spec.state.dir) / pipeline.pipeline / processor / f"{topic}-{partition}"


def seed_state(pipeline: Pipeline, processor: str, states: dict[tuple[str, int], dict[bytes, bytes]]) -> list[Path]:
    """Write each partition's KV contents into a fresh RocksDB. Refuses to touch existing state."""
    if not pipeline.processors[processor].stateful:
        raise ValueError(f"processor `{processor}` is stateless: there is no state to seed")
    paths = {tp: state_path(pipeline, processor, *tp) for tp in states}
    existing = [str(p) for p in paths.values() if p.exists() and any(p.iterdir())]
    if existing:
        raise StateExists(f"state already exists at {', '.join(sorted(existing))}; remove it to seed from a backfill")
    written = []
    for tp, kv in sorted(states.items()):
        db = RocksKV(paths[tp])
        try:
            items = sorted(kv.items())
            for i in range(0, len(items), 100_000):
                db.write(dict(items[i:i + 100_000]))
            db.flush()
        finally:
            db.close()
        written.append(paths[tp])
    return written


def seed_monoid_table(pipeline: Pipeline, processor: str, states: dict[tuple[str, int], dict[bytes, bytes]],
                      next_offsets: dict[tuple[str, int], int]) -> str:
    """`state.backend: postgres`: merge each partition's final state into the processor's table and write
    its next input offset to `stylus_monoid_offsets`, all in ONE transaction, with the table's own merge
    (SQL combiner or the processor's `combine`), as a worker's checkpoint would. Refuses when the table
    holds rows or the consumer group has offsets there. Returns the table name."""
    import orjson
    from psycopg import sql

    from stylus.api import import_processor_class
    from stylus.monoid.pg import OFFSETS_TABLE, Db, MonoidTable, default_table
    from stylus.monoid.processor import MonoidProcessor

    spec = pipeline.processors[processor]
    if spec.state.backend != "postgres" or spec.state.dsn is None:
        raise ValueError(f"processor `{processor}` does not keep its state in PostgreSQL")
    proc = import_processor_class(spec.class_)(config=spec.config, name=processor)
    if not isinstance(proc, MonoidProcessor):
        raise TypeError(f"processor `{processor}`: state backend `postgres` needs a MonoidProcessor")
    name = spec.state.table or default_table(pipeline.pipeline, processor)
    group = pipeline.group_id(processor)
    db = Db(reveal(spec.state.dsn))
    try:
        table = MonoidTable(db, name, proc.zero, proc.combine, proc.sql_combiner)
        table.create()
        with db.transaction():
            t, o = sql.Identifier(name), sql.Identifier(OFFSETS_TABLE)
            db.execute(sql.SQL("LOCK TABLE {}, {} IN SHARE ROW EXCLUSIVE MODE").format(t, o))
            rows = db.execute(sql.SQL("SELECT count(*) FROM {}").format(t)).fetchone()
            offsets = db.execute(sql.SQL("SELECT count(*) FROM {} WHERE consumer_group = %s").format(o),
                                 (group,)).fetchone()
            if (rows and rows[0]) or (offsets and offsets[0]):
                raise StateExists(f"table `{name}` already has state or offsets for group `{group}`; "
                                  "empty it to seed from a backfill")
            for tp in sorted(set(states) | set(next_offsets)):
                deltas = {k[1:].decode("utf-8", "surrogateescape"): orjson.loads(v)
                          for k, v in states.get(tp, {}).items() if k.startswith(b"s")}
                table.save(group, tp[0], tp[1], expected=None, offset=next_offsets.get(tp), deltas=deltas)
    finally:
        db.close()
    return name
