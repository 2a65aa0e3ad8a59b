"""`tables:` in the YAML: what is accepted, and every setting that could not be honoured refused with its fix;
and the table semantics on the TestDriver (no broker): lookups, tombstones, TTL, placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from stylus.config import PipelineError, parse_pipeline
from stylus.config.tables import tables_for
from stylus.testing import TestDriver

BASE = """\
pipeline: t
topics:
  events: {partitions: 4}
  out: {partitions: 4}
  dims: {partitions: DIMS}
tables:
  dims: TABLE
processors:
  enricher:
    class: tests.tables.apps:Enricher
    inputs: [events]
    outputs: [out]
    semantics: SEMANTICS
EXTRA
"""


def text(table: str = "{topic: dims, placement: global}", *, dims: int = 4, extra: str = "",
         semantics: str = "{output: at_least_once}") -> str:
    return (BASE.replace("DIMS", str(dims)).replace("TABLE", table).replace("EXTRA", extra)
            .replace("SEMANTICS", semantics))


def problems(source: str) -> list[str]:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(source, file="p.yaml")
    return [f"{p.path}: {p.message} | fix: {p.fix}" for p in info.value.problems]


def test_a_table_with_every_setting_parses(tmp_path: Path) -> None:
    pipeline = parse_pipeline(text("{topic: dims, placement: partitioned, key: id, value: name, ttl: 1h}"),
                              file="p.yaml")
    spec = pipeline.tables["dims"]
    assert (spec.topic, spec.placement, spec.key, spec.value, spec.ttl) == ("dims", "partitioned", "id", ("name",),
                                                                            3600.0)
    assert tables_for(pipeline, "enricher") == ["dims"]  # unlisted: every table that fits
    assert parse_pipeline(text("{topic: dims}"), file="p.yaml").tables["dims"].placement == "global"


@pytest.mark.parametrize(("table", "extra", "dims", "wanted"), [
    ("{topic: nope}", "", 4, "tables.dims.topic: topic `nope` is not declared"),
    ("{topic: dims, placement: partitioned}", "    tables: [dims]", 2,
     "processors.enricher.tables.0: partitioned table `dims` (dims: 2 partitions) is not co-partitioned"),
    ("{topic: dims}", "    tables: [other]", 4, "processors.enricher.tables.0: table `other` is not declared"),
    ("{topic: dims, parquet: missing.parquet, key: id}", "", 4, "tables.dims.parquet: `missing.parquet` not found"),
    ("{topic: dims, parquet: missing.parquet}", "", 4, "a Parquet snapshot needs the column holding the key"),
    ("{topic: dims, ttl: 0s}", "", 4, "tables.dims.ttl"),
    ("{topic: dims, placement: everywhere}", "", 4, "tables.dims.placement"),
    ("{topic: dims, colour: red}", "", 4, "unknown key `colour`"),
])
def test_settings_that_cannot_be_honoured_are_refused_with_the_fix(table: str, extra: str, dims: int,
                                                                    wanted: str) -> None:
    found = problems(text(table, dims=dims, extra=extra))
    assert any(wanted in p for p in found), found
    assert all("fix: " in p and not p.endswith("fix: ") for p in found)


def test_fields_need_a_json_topic_and_a_command_processor_looks_nothing_up() -> None:
    source = text("{topic: dims, key: id}").replace("dims: {partitions: 4}", "dims: {partitions: 4, serde: string}")
    assert any("`key` names fields of JSON objects" in p for p in problems(source))
    command = """\
pipeline: t
topics: {events: {partitions: 1}, dims: {partitions: 1}}
tables: {dims: {topic: dims}}
processors:
  split: {command: [cat], inputs: [events], tables: [dims]}
"""
    assert any("only a Python `class` processor looks tables up" in p for p in problems(command))


def test_a_mismatched_partitioned_table_is_left_out_of_the_default_tables() -> None:
    pipeline = parse_pipeline(text("{topic: dims, placement: partitioned}", dims=2), file="p.yaml")
    assert tables_for(pipeline, "enricher") == []


@pytest.mark.parametrize("placement", ["global", "partitioned"])
def test_the_driver_looks_up_deletes_and_expires_as_the_runtime(tmp_path: Path, placement: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text(f"{{topic: dims, placement: {placement}, ttl: 1m}}",
                         semantics="{state: exactly_once, output: exactly_once}"))
    with TestDriver(path) as driver:
        for n in range(8):
            driver.send("dims", {"n": n}, key=f"k{n}", timestamp=1_000)
        driver.send("dims", None, key="k2", timestamp=1_000)
        for n in range(8):
            driver.send("events", {"i": n}, key=f"k{n}", timestamp=50_000)
        driver.send("events", {"i": 100}, key="k1", timestamp=61_001)  # past the TTL of k1's row
        driver.checkpoint()
        driver.send("dims", {"n": "new"}, key="k5", timestamp=60_000)
        driver.crash()  # the table's copy survives the crash, as a RocksDB copy does
        driver.send("events", {"i": 101}, key="k5", timestamp=70_000)
        driver.checkpoint()
        rows = {r.value["i"]: r.value["row"] for r in driver.outputs("out", committed=True)}
    assert rows == {0: {"n": 0}, 1: {"n": 1}, 2: None, 3: {"n": 3}, 4: {"n": 4}, 5: {"n": 5}, 6: {"n": 6},
                    7: {"n": 7}, 100: None, 101: {"n": "new"}}
