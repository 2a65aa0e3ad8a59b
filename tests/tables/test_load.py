"""Bulk loads: `stylus table load` from JSON lines and Parquet, and a table based on a Parquet snapshot that its
topic then keeps current (topic records win over the snapshot's rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import PipelineFactory
from tests.support.chaos import Rec, produce_now
from tests.support.cli import run_stylus
from tests.support.kafka import read_json, read_raw
from tests.tables.helpers import START, by_i, lookup_doc, produce_rows, python_join


def test_table_load_produces_rows_keyed_by_the_key_field(bootstrap: str, pipeline_factory: PipelineFactory,
                                                         tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(lookup_doc("global", partitions=2, table={"key": "id"}))
    lines = tmp_path / "rows.jsonl"
    lines.write_text("".join(json.dumps({"id": n, "name": f"n{n}"}) + "\n" for n in range(20)))
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": n, "name": f"p{n}"} for n in range(20, 30)]), parquet)
    for source, count in ((lines, 20), (parquet, 10)):
        result = run_stylus("table", "load", str(path), "dims", "--from", str(source), bootstrap=bootstrap)
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"loaded {count} rows into table dims" in result.stdout
    records = read_raw(bootstrap, pipeline.tables["dims"].topic)
    assert sorted((m.key(), json.loads(m.value())["name"]) for m in records) == sorted(
        [(str(n).encode(), f"n{n}") for n in range(20)] + [(str(n).encode(), f"p{n}") for n in range(20, 30)])
    bad = run_stylus("table", "load", str(path), "nope", "--from", str(lines), bootstrap=bootstrap)
    assert bad.returncode == 1 and "no table `nope`" in bad.stderr


def test_a_parquet_snapshot_is_the_base_and_the_topic_wins(bootstrap: str, pipeline_factory: PipelineFactory,
                                                            tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    pq.write_table(pa.Table.from_pylist([{"id": f"k{n}", "name": f"base-{n}"} for n in range(10)]),
                   snapshot / "part-0.parquet")
    doc = lookup_doc("partitioned", partitions=2, table={"key": "id", "parquet": str(snapshot), "value": ["name"]})
    path, pipeline = pipeline_factory(doc)
    produce_rows(bootstrap, pipeline.tables["dims"].topic, {"k1": {"id": "k1", "name": "topic-1", "extra": 1},
                                                            "k2": None})
    records = [Rec(f"k{n}", {"i": n}, START + n) for n in range(12)]
    produce_now(bootstrap, pipeline.processors["enricher"].inputs[0], records)
    result = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    table = {f"k{n}": {"name": f"base-{n}"} for n in range(10)} | {"k1": {"name": "topic-1"}}
    table.pop("k2")
    assert by_i(read_json(bootstrap, pipeline.processors["enricher"].outputs[0])) == python_join(records, table)
