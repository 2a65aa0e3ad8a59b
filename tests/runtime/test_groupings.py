"""Storm's groupings on a real broker (docs/groupings.md): a real `stylus run`, then every partition of every
output topic read back. `all` copies a record into each partition, `global` puts everything in partition 0,
`ctx.emit(partition=n)` picks one and wins over the output's grouping, an impossible partition dead-letters
the record. The same under each output semantics: at once, held (at-most-once), in the transaction."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
import pytest

from tests.conftest import PipelineFactory
from tests.runtime.test_partitioning import java_partition
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw

SEMANTICS = {
    "at_least_once": {"output": "at_least_once"},
    "at_most_once": {"state": "at_most_once", "output": "at_most_once"},
    "exactly_once": {"state": "exactly_once", "output": "exactly_once"},
}


def _by_partition(bootstrap: str, topic: str) -> dict[int, list[tuple[str | None, int]]]:
    """partition -> [(key, id)] in offset order, from every partition of `topic`."""
    found: dict[int, list[tuple[str | None, int]]] = defaultdict(list)
    for msg in read_raw(bootstrap, topic):
        key = msg.key()
        found[msg.partition()].append((None if key is None else key.decode(), orjson.loads(msg.value())["id"]))
    return dict(found)


@pytest.mark.parametrize("output", list(SEMANTICS))
def test_each_grouping_delivers_to_the_partitions_it_promises(bootstrap: str, pipeline_factory: PipelineFactory,
                                                              output: str) -> None:
    path, pipeline = pipeline_factory({
        "pipeline": "groupings",
        "topics": {"src": {"partitions": 1}, "control": {"partitions": 3}, "words": {"partitions": 3},
                   "single": {"partitions": 2}},
        "processors": {"router": {
            "class": "tests.apps.grouping:Router", "inputs": ["src"],
            # the default output is grouped: the engine's hot path must give way to it
            "outputs": [{"topic": "control", "grouping": "all"}, "words", {"topic": "single", "grouping": "global"}],
            "semantics": SEMANTICS[output], "checkpoint": {"interval": "500ms"}}},
    })
    spec = pipeline.processors["router"]
    control, words, single = spec.outputs
    assert spec.groupings == {control: "all", single: "global"}
    keys = [f"k{i}" for i in range(12)]
    records: list[tuple[str | None, dict[str, Any]]] = []
    records += [(k, {"id": i}) for i, k in enumerate(keys)]  # default output: all
    records += [(k, {"id": 100 + i, "topic": words}) for i, k in enumerate(keys)]  # by key
    records += [(None, {"id": 150 + i, "topic": words}) for i in range(6)]  # no key: spread
    records += [(k, {"id": 200 + i, "topic": single}) for i, k in enumerate(keys)]  # global
    records += [(k, {"id": 300 + i, "topic": words, "partition": 2}) for i, k in enumerate(keys[:4])]  # direct
    records += [("c", {"id": 400, "topic": control, "partition": 1})]  # direct wins over `all`
    records += [("g", {"id": 401, "topic": single, "partition": 1})]  # and over `global`
    records += [("x", {"id": 500, "topic": words, "partition": 3})]  # no partition 3: dead letter
    records += [("y", {"id": 501, "partition": -1})]  # nor -1
    produce(bootstrap, spec.inputs[0], records)
    assert run_stylus("run", str(path), "--exit-when-idle", "2", bootstrap=bootstrap).returncode == 0

    everywhere = [(k, i) for i, k in enumerate(keys)]
    assert _by_partition(bootstrap, control) == {0: everywhere, 1: [*everywhere, ("c", 400)], 2: everywhere}

    got_words = _by_partition(bootstrap, words)
    keyed = {p: [(k, i) for k, i in got if k is not None and i < 300] for p, got in got_words.items()}
    expected: dict[int, list[tuple[str | None, int]]] = defaultdict(list)
    for i, k in enumerate(keys):
        expected[java_partition(k.encode(), 3)].append((k, 100 + i))
    assert {p: v for p, v in keyed.items() if v} == dict(expected)
    assert sorted(i for got in got_words.values() for k, i in got if k is None) == list(range(150, 156))
    assert [(k, i) for k, i in got_words[2] if i >= 300] == [(k, 300 + i) for i, k in enumerate(keys[:4])]

    assert _by_partition(bootstrap, single) == {0: [(k, 200 + i) for i, k in enumerate(keys)], 1: [("g", 401)]}

    dead = read_raw(bootstrap, pipeline.dlq_topic("router"))
    assert [orjson.loads(m.value())["id"] for m in dead] == [500, 501]
    errors = [dict(m.headers())["stylus.error"].decode() for m in dead]
    assert f"`{words}`, which has 3 partitions" in errors[0]
    assert f"`{control}`, which has 3 partitions" in errors[1]
