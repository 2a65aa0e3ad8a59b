"""Shared by the table tests: the lookup pipeline, its input, and the plain-Python join it must equal."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import yaml
from confluent_kafka import Producer

from tests.support.chaos import Rec

FAST_GROUP = {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}}
START = 1_700_000_000_000


def lookup_doc(placement: str = "global", *, partitions: int = 4, table_partitions: int | None = None,
               semantics: dict[str, str] | None = None, listed: bool = True,
               table: dict[str, Any] | None = None) -> dict[str, Any]:
    """events -> enricher (looks up `dims` per record key) -> joined."""
    proc: dict[str, Any] = {
        "class": "tests.tables.apps:Enricher", "inputs": ["events"], "outputs": ["joined"],
        "semantics": semantics or {"output": "at_least_once"}, "checkpoint": {"interval": "500ms"},
    }
    if listed:
        proc["tables"] = ["dims"]
    return {
        "kafka": FAST_GROUP,
        "topics": {"events": {"partitions": partitions}, "joined": {"partitions": partitions},
                   "dims": {"partitions": table_partitions or partitions, "config": {"cleanup.policy": "compact"}}},
        "tables": {"dims": {"topic": "dims", "placement": placement, **(table or {})}},
        "processors": {"enricher": proc},
    }


def other_machine(path: Path, state_dir: Path) -> Path:
    """The same pipeline file with a state directory of its own (another machine)."""
    doc = yaml.safe_load(path.read_text())
    for spec in doc["processors"].values():
        spec.setdefault("state", {})["dir"] = str(state_dir)
    other = path.with_name(f"{path.stem}-{state_dir.name}.yaml")
    other.write_text(yaml.safe_dump(doc, sort_keys=False))
    return other


def rows(keys: int, version: int = 0) -> dict[str, dict[str, Any]]:
    return {f"k{n}": {"name": f"row-{n}", "v": version} for n in range(keys)}


def events(count: int, keys: int, *, seed: int = 3, first: int = 0, ts: int = START) -> list[Rec]:
    rng = random.Random(seed)
    return [Rec(f"k{rng.randrange(keys)}", {"i": first + i}, ts + i) for i in range(count)]


def python_join(records: list[Rec], table: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """i -> the output the Enricher must emit for it (count omitted)."""
    return {r.value["i"]: {"i": r.value["i"], "key": r.key, "row": table.get(str(r.key))} for r in records}


def by_i(outputs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {o["i"]: {k: v for k, v in o.items() if k != "count"} for o in outputs}


def produce_rows(bootstrap: str, topic: str, table: dict[str, Any], *, timestamp: int | None = None) -> None:
    """Table rows keyed by their key (the Java partitioner); a None value is a tombstone."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})
    for key, value in table.items():
        extra = {"timestamp": timestamp} if timestamp is not None else {}
        while True:
            try:
                producer.produce(topic, None if value is None else orjson.dumps(value), key.encode(), **extra)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
