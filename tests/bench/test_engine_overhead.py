"""bench/engine_overhead.py compares like with like: over the same messages, the raw body, the API's floor,
the engine and the batch-level floor queue as many outputs as the work calls for (the kept types, or one
count per record), so the differences it prints are costs, not different work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.engine_overhead import (
    BATCH,
    OUTPUT,
    batch_floor_body,
    batch_sides,
    engine_body,
    floor_body,
    new_processor,
    queue_only_producer,
    raw_body,
    read_messages,
)
from bench.throughput import KEEP, bench_pipeline

RECORDS = 3000


@pytest.fixture(scope="module")
def batches(bootstrap: str) -> list[list[Any]]:
    msgs = read_messages(RECORDS, bootstrap)
    return [msgs[i:i + BATCH] for i in range(0, len(msgs), BATCH)]


@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
def test_the_four_sides_queue_the_same_outputs(batches: list[list[Any]], stateful: bool, tmp_path: Path) -> None:
    msgs = [m for batch in batches for m in batch]
    expected = RECORDS if stateful else sum(orjson.loads(m.value())["type"] in KEEP for m in msgs)
    assert 0 < expected <= RECORDS
    pipeline = bench_pipeline("127.0.0.1:1", msgs[0].topic(), OUTPUT, stateful, str(tmp_path / "unused"))
    queued = []
    sides = ((raw_body, (batches, stateful)), (floor_body, (batches, new_processor(pipeline))),
             (engine_body, (batches, pipeline, tmp_path / "state")), (batch_floor_body, (batches, stateful)))
    for body, args in sides:
        purged: list[Any] = []  # each queued output is reported once, as purged (its broker never answers)
        producer = queue_only_producer(lambda err, msg, purged=purged: purged.append(msg.topic()))
        body(producer, *args)
        producer.purge()
        producer.poll(0)
        queued.append(purged)
    assert queued == [[OUTPUT] * expected] * 4


@pytest.mark.parametrize("stateful", [False, True], ids=["filter", "totals"])
def test_the_batch_sides_queue_the_outputs_of_their_work(batches: list[list[Any]], stateful: bool,
                                                         tmp_path: Path) -> None:
    """`--batch`: the raw loop and the batch engine queue the same outputs (the kept records, or one running total
    per record); the client's floors as many as they stand for (all, or the 3 in 5 with `offset % 5 < 3`)."""
    msgs = [m for batch in batches for m in batch]
    kept = RECORDS if stateful else sum(orjson.loads(m.value())["type"] in KEEP for m in msgs)
    floor = RECORDS if stateful else sum(m.offset() % 5 < 3 for m in msgs)
    queued: dict[str, list[bytes]] = {}
    for name, (body, args) in batch_sides(stateful, msgs[0].topic(), str(tmp_path / "unused")).items():
        purged: list[Any] = []
        producer = queue_only_producer(lambda err, msg, purged=purged: purged.append(msg.value()))
        body(producer, batches, *args, *((tmp_path / "state",) if name == "batch" else ()))
        producer.purge()
        producer.poll(0)
        queued[name] = purged
    assert {name: len(values) for name, values in queued.items()} == {
        "raw": kept, "batch": kept, "client": floor, "client+decode": floor}
    if stateful:  # the same running totals, key by key, in the same order per key
        assert sorted(map(orjson.loads, queued["batch"]), key=lambda v: (v["key"], v["count"])) == \
            sorted(map(orjson.loads, queued["raw"]), key=lambda v: (v["key"], v["count"]))
    else:  # the same records kept, as read
        assert sorted(queued["batch"]) == sorted(queued["raw"])
