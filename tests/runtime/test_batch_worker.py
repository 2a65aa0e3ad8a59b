"""Batch processors in the real Worker on the real broker: the same outputs and state as the per-record processor
of the same logic under every semantics pair, failing records bisected out to the dead-letter topic with every
other record processed once, and batch windows equal to per-record windows."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from stylus.config.model import FIGURE8_PAIRS, Pipeline
from stylus.core.batch.engine import BatchEngine
from stylus.kafka import columnar
from stylus.runtime.transactions import ID_HEADER
from stylus.runtime.worker import Worker
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.apps.batch import KEEP, Poison
from tests.conftest import PipelineFactory
from tests.support.kafka import produce, read_raw
from tests.support.threads import start_thread

PARTITIONS = 3
PAIRS = list(FIGURE8_PAIRS)


@pytest.fixture(params=["columnar", "messages"])
def client_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How batch processors' records reach the engine: read and produced by the C module (stylus/kafka/
    columnar.py), or, where it is not available, as confluent-kafka Messages and one `produce` call each."""
    if request.param == "messages":
        monkeypatch.setattr(columnar, "_module", None)
    return str(request.param)


def _id(pair: tuple[str, str]) -> str:
    short = {"at_least_once": "alo", "at_most_once": "amo", "exactly_once": "eo"}
    return f"{short[pair[0]]}-{short[pair[1]]}"


def run_workers(pipeline: Pipeline, *names: str, timeout: float = 120) -> list[Worker]:
    """Each processor in its own Worker, together, until every one has consumed its inputs and idled."""
    workers = [Worker(pipeline, name, pipeline.kafka["bootstrap.servers"], exit_when_idle=1.0) for name in names]
    started = [start_thread(worker.run) for worker in workers]
    for thread, _ in started:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread, _ in started), "a worker did not finish"
    errors = [exc for _, raised in started for exc in raised]
    assert not errors, errors
    return workers


def two_processors(pipeline_factory: PipelineFactory, batch: str, record: str, pair: tuple[str, str],
                   **extra: Any) -> tuple[Path, Pipeline]:
    """One input read by a batch processor and by its per-record twin, each with its own output."""
    semantics = {"state": pair[0], "output": pair[1]}
    common = {"inputs": ["events"], "semantics": semantics, "checkpoint": {"interval": "300ms"}, **extra}
    return pipeline_factory({
        "pipeline": "batch",
        "topics": {"events": {"partitions": PARTITIONS}, "out-b": {"partitions": 2}, "out-r": {"partitions": 2}},
        "processors": {"b": {"class": batch, "outputs": ["out-b"], **common},
                       "r": {"class": record, "outputs": ["out-r"], **common}},
    })


def with_bootstrap(pipeline: Pipeline, bootstrap: str) -> Pipeline:
    return pipeline.model_copy(update={"kafka": {**pipeline.kafka, "bootstrap.servers": bootstrap}})


def per_key(bootstrap: str, topic: str) -> dict[str | None, list[tuple[Any, int]]]:
    """Each key's outputs in the order read (a key's outputs keep their input order)."""
    out: dict[str | None, list[tuple[Any, int]]] = defaultdict(list)
    for msg in read_raw(bootstrap, topic):
        key = msg.key()
        out[None if key is None else key.decode()].append((orjson.loads(msg.value()), msg.timestamp()[1]))
    return dict(out)


def states(state_dir: Path, pipeline: Pipeline, processor: str) -> list[dict[str, Any]]:
    topic = pipeline.processors[processor].inputs[0]
    out = []
    for partition in range(PARTITIONS):
        store = PartitionStore(RocksKV(state_dir / pipeline.pipeline / processor / f"{topic}-{partition}"))
        try:
            out.append(dict(store.state.items()))
        finally:
            store.close()
    return out


def feed(bootstrap: str, topic: str, n: int, seed: int, poison: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    values = [{"id": i, "type": ["post", "comment", "like", "share", "view"][i % 5], "n": rng.randrange(100)}
              for i in range(n)]
    for i in poison:  # a value of its own: a state write of it that was not undone would show
        values[i].update(fail=True, n=1000 + i)
    produce(bootstrap, topic, [(f"k{rng.randrange(60)}", v) for v in values],
            timestamps=[1_700_000_000_000 + i for i in range(n)])
    return values


@pytest.mark.parametrize("pair", PAIRS, ids=_id)
def test_running_totals_equal_the_per_record_processor(bootstrap: str, pipeline_factory: PipelineFactory,
                                                       tmp_path: Path, pair: tuple[str, str],
                                                       client_path: str) -> None:
    _, pipeline = two_processors(pipeline_factory, "tests.apps.batch:RunningTotals",
                                 "tests.apps.batch:RunningTotalsPerRecord", pair, batch_size=700)
    pipeline = with_bootstrap(pipeline, bootstrap)
    feed(bootstrap, pipeline.processors["b"].inputs[0], 6000, seed=1)
    batch, _ = run_workers(pipeline, "b", "r")
    assert isinstance(batch.engine, BatchEngine) and batch.engine.batches >= 9  # in batches, not one by one
    assert (batch.reader is not None) == (client_path == "columnar")
    assert (batch.sink.produce_many is not None) == (client_path == "columnar")
    got, want = per_key(bootstrap, pipeline.processors["b"].outputs[0]), per_key(
        bootstrap, pipeline.processors["r"].outputs[0])
    assert sum(map(len, want.values())) == 6000
    assert got == want  # values, timestamps and order per key
    assert states(tmp_path / "state", pipeline, "b") == states(tmp_path / "state", pipeline, "r")


@pytest.mark.parametrize("output", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("cls", ["Keep", "KeepMask"])
def test_filter_forwards_the_input_bytes(bootstrap: str, pipeline_factory: PipelineFactory, cls: str,
                                         output: str) -> None:
    """A table of rows or a mask: the kept records' bytes as read, keyed and timed as the per-record twin's; with
    record ids (exactly-once output), each forwarded record's id names its own input offset."""
    _, pipeline = two_processors(pipeline_factory, f"tests.apps.batch:{cls}", "tests.apps.batch:KeepPerRecord",
                                 ("exactly_once" if output == "exactly_once" else "at_least_once", output))
    ids = "always" if output == "exactly_once" else "auto"
    pipeline = with_bootstrap(pipeline.model_copy(update={"processors": {
        n: p.model_copy(update={"semantics": p.semantics.model_copy(update={"state": None, "output_ids": ids})})
        for n, p in pipeline.processors.items()}}), bootstrap)
    values = feed(bootstrap, pipeline.processors["b"].inputs[0], 3000, seed=2)
    run_workers(pipeline, "b", "r")
    sent = {v["id"]: v for v in values if v["type"] in KEEP}
    forwarded = read_raw(bootstrap, pipeline.processors["b"].outputs[0])
    assert sorted(orjson.loads(m.value())["id"] for m in forwarded) == sorted(sent)
    inputs = {orjson.loads(m.value())["id"]: m for m in read_raw(bootstrap, pipeline.processors["b"].inputs[0])}
    assert all(m.value() == inputs[orjson.loads(m.value())["id"]].value() for m in forwarded)  # the bytes as read
    assert per_key(bootstrap, pipeline.processors["b"].outputs[0]) == per_key(
        bootstrap, pipeline.processors["r"].outputs[0])
    if output == "exactly_once":
        for m in forwarded:
            stamped = re.search(rb"(\d+):(\d+)$", dict(m.headers() or [])[ID_HEADER])
            assert stamped is not None
            assert (int(stamped[1]), int(stamped[2])) == (inputs[orjson.loads(m.value())["id"]].offset(), 0)


@pytest.mark.parametrize("pair", PAIRS, ids=_id)
def test_poison_records_are_dead_lettered_and_the_rest_processed_once(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, pair: tuple[str, str],
        client_path: str) -> None:
    """Each batch holding a poison record fails and is split until the poison records fail alone: they go to
    the dead-letter topic, every other record's output and state write happen once, and the writes the failed
    attempts made are undone (the state holds no poison record's key)."""
    _, pipeline = two_processors(pipeline_factory, "tests.apps.batch:Poison", "tests.apps.batch:Poison", pair,
                                 batch_size=1000)
    pipeline = with_bootstrap(pipeline, bootstrap)
    poison = frozenset({17, 1500, 1501, 2999})
    feed(bootstrap, pipeline.processors["b"].inputs[0], 3000, seed=3, poison=poison)
    Poison.calls = 0
    (worker,) = run_workers(pipeline, "b")
    engine = worker.engine
    assert isinstance(engine, BatchEngine)
    assert engine.splits >= len(poison)
    assert Poison.calls < 3000 // 10  # bisection, not a record at a time
    letters = read_raw(bootstrap, pipeline.dlq_topic("b"))
    assert sorted(orjson.loads(m.value())["id"] for m in letters) == sorted(poison)
    assert all(dict(m.headers())["stylus.error.stage"] == b"process" for m in letters)
    outputs = [orjson.loads(m.value())["n"] for m in read_raw(bootstrap, pipeline.processors["b"].outputs[0])]
    inputs = [orjson.loads(m.value()) for m in read_raw(bootstrap, pipeline.processors["b"].inputs[0])]
    assert sorted(outputs) == sorted(v["n"] for v in inputs if v["id"] not in poison)  # each once
    kept = set().union(*(s.keys() for s in states(tmp_path / "state", pipeline, "b")))
    assert kept == {f"n{v['n']}" for v in inputs if v["id"] not in poison}


def test_batch_windows_equal_per_record_windows(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    """A 1-minute tumbling sum per category by event time, disordered within 20 s, 30 s allowed lateness: the
    batch windows emit exactly the per-record windows' results (each once), and both equal the true sums."""
    window = {"window": {"type": "tumbling", "size": "1m"}, "aggregate": {"type": "sum", "field": "amount"},
              "key": "category"}
    _, pipeline = two_processors(
        pipeline_factory, "stylus.windows.batch:BatchWindowedProcessor", "stylus.windows:WindowedProcessor",
        ("exactly_once", "at_least_once"), config=window, batch_size=500,
        event_time={"field": "ts", "allowed_lateness": "30s", "idle_timeout": "1s"})
    pipeline = with_bootstrap(pipeline, bootstrap)
    rng = random.Random(4)
    base = 1_700_000_040_000
    rows = []
    truth: dict[tuple[str, int], int] = defaultdict(int)
    for i in range(8000):
        ts = base + i * 50 + rng.randrange(20_000)
        category = f"c{rng.randrange(12)}"
        amount = rng.randrange(1, 50)
        rows.append((category, {"category": category, "amount": amount, "ts": ts}))
        truth[(category, ts - ts % 60_000)] += amount
    rows.sort(key=lambda r: r[1]["ts"] - rng.randrange(20_000))  # disordered, within the allowed lateness
    rows += [(f"c{c}", {"category": "end", "amount": 0, "ts": base + 10**8}) for c in range(12)]  # close all
    produce(bootstrap, pipeline.processors["b"].inputs[0], rows)
    run_workers(pipeline, "b", "r")

    def results(processor: str) -> dict[tuple[str, int], Any]:
        found: dict[tuple[str, int], Any] = {}
        for value, _ in (v for vs in per_key(bootstrap, pipeline.processors[processor].outputs[0]).values()
                         for v in vs):
            assert (value["key"], value["start"]) not in found, "a window emitted twice"
            found[(value["key"], value["start"])] = value
        return found

    got, want = results("b"), results("r")
    assert got == want
    assert {k: v["value"] for k, v in got.items() if k[0] != "end"} == dict(truth)
