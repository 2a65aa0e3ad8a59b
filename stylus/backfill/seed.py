"""`--seed-state`: write a backfill's final state as the processor's live RocksDB state, one database
per input partition at `{state.dir}/{pipeline}/{processor}/{topic}-{partition}` holding the state
keys, timers and the next input offset, so a new processor continues on the stream from there."""

from __future__ import annotations

from pathlib import Path

from stylus.config.model import Pipeline
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
