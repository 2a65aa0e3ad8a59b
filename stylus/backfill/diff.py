"""`replay --diff`: compare what the current code emitted over past input with what the live processor
emitted for the same input. Outputs are matched per (topic, key) as multisets of values, within the time
span of the replayed outputs (an output's timestamp is its input record's unless the code sets one)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from stylus.backfill.job import Emitted
from stylus.config.model import Pipeline
from stylus.kafka.reader import read_topic
from stylus.serde import decode_key, decoder

Item = tuple[str, str | None, bytes]  # topic, key, canonical JSON of the value


def _canon(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def live_outputs(bootstrap: str, pipeline: Pipeline, name: str, lo: int, hi: int) -> list[Item]:
    """The live processor's outputs with lo <= timestamp <= hi, from its output topics."""
    out: list[Item] = []
    for topic in pipeline.processors[name].outputs:
        decode = decoder(pipeline.topics[topic].serde)
        for msg in read_topic(bootstrap, topic):
            ts = msg.timestamp()[1]
            raw = msg.value()
            if lo <= ts <= hi:
                out.append((topic, decode_key(msg.key()), _canon(None if raw is None else decode(raw))))
    return out


def replayed(emitted: Iterable[Emitted]) -> list[Item]:
    return [(e.topic, e.key, _canon(e.value)) for e in emitted]


def diff_outputs(live: list[Item], replay: list[Item], limit: int = 10) -> list[str]:
    """Human lines for the first `limit` (topic, key) groups whose outputs differ, in (topic, key) order."""
    by_key_live: dict[tuple[str, str | None], Counter[bytes]] = {}
    by_key_replay: dict[tuple[str, str | None], Counter[bytes]] = {}
    for topic, key, value in live:
        by_key_live.setdefault((topic, key), Counter())[value] += 1
    for topic, key, value in replay:
        by_key_replay.setdefault((topic, key), Counter())[value] += 1
    lines: list[str] = []
    for ident in sorted(set(by_key_live) | set(by_key_replay), key=lambda k: (k[0], k[1] or "")):
        a, b = by_key_live.get(ident, Counter()), by_key_replay.get(ident, Counter())
        if a == b:
            continue
        only_live, only_replay = sorted((a - b).elements())[:3], sorted((b - a).elements())[:3]
        lines.append(f"{ident[0]} key={ident[1]!r}: live {sum(a.values())} vs replay {sum(b.values())}; "
                     f"only live: {[v.decode() for v in only_live]}; only replay: {[v.decode() for v in only_replay]}")
        if len(lines) >= limit:
            break
    return lines
