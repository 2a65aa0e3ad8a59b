"""`stylus backfill` and `stylus replay --diff` as real processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from stylus.kafka.admin import create_topics
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw

DOC = {
    "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
    "processors": {"count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"]}},
}


def test_backfill_to_parquet_and_replay_diff(bootstrap: str, pipeline_factory: Any, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory(DOC)
    words, counts = list(pipeline.topics)
    create_topics(bootstrap, dict(pipeline.topics))
    produce(bootstrap, words, [(f"w{i % 7}", {"i": i}) for i in range(400)], timestamps=range(10_000, 10_400))
    assert run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap).returncode == 0

    out_dir = tmp_path / "out"
    done = run_stylus("backfill", str(path), "--processor", "count", "--from", "10100", "--to", "offset:1000",
                      "--output", str(out_dir), "--master", "local[1]", bootstrap=bootstrap, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "300 records" in done.stdout and "tasks" in done.stderr  # the progress bar
    table = pq.read_table(out_dir)
    assert table.column_names == ["key", "value", "timestamp", "topic"] and table.num_rows == 300
    assert min(table.column("timestamp").to_pylist()) == 10_100
    assert {json.loads(v)["word"] for v in table.column("value").to_pylist()} == {f"w{i}" for i in range(7)}

    shadow = f"{counts}-shadow"
    same = run_stylus("replay", str(path), "--processor", "count", "--shadow", shadow, "--diff", "--no-progress",
                      "--master", "local[1]", bootstrap=bootstrap, timeout=180)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no differences: 400 outputs" in same.stdout
    shadowed = read_raw(bootstrap, shadow)
    assert len(shadowed) == 400 and dict(shadowed[0].headers())["stylus.topic"] == counts.encode()

    changed = yaml.safe_load(path.read_text())  # "new code": the same processor name, other behaviour
    changed["processors"]["count"]["class"] = "tests.apps.counting:Passthrough"
    changed_path = tmp_path / "changed.yaml"
    changed_path.write_text(yaml.safe_dump(changed))
    differ = run_stylus("replay", str(changed_path), "--processor", "count", "--shadow", f"{shadow}-2", "--diff",
                        "--limit", "3", "--no-progress", "--master", "local[1]", bootstrap=bootstrap, timeout=180)
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert "differences (first 3)" in differ.stdout and "only live" in differ.stdout


@pytest.mark.parametrize(("command", "args", "message"), [
    ("backfill", ["--processor", "nope"], "Invalid value for --processor: no processor `nope`; the pipeline has"),
    ("replay", ["--processor", "nope", "--shadow", "s"], "Invalid value for --processor: no processor `nope`"),
    ("backfill", ["--processor", "count", "--from", "yesterday-ish"], "Invalid value for --from: 'yesterday-ish'"),
    ("replay", ["--processor", "count", "--to", "yesterday-ish", "--shadow", "s"],
     "Invalid value for --to: 'yesterday-ish'"),
    ("replay", ["--processor", "count", "--shadow", "{counts}"],
     "Invalid value for --shadow: `{counts}` is a pipeline topic"),
])
def test_a_wrong_option_is_named_before_spark_starts(command: str, args: list[str], message: str, bootstrap: str,
                                                      pipeline_factory: Any) -> None:
    path, pipeline = pipeline_factory(DOC)
    counts = list(pipeline.topics)[1]
    done = run_stylus(command, str(path), *(a.format(counts=counts) for a in args), bootstrap=bootstrap, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message.format(counts=counts) in done.stderr
    assert "Spark" not in done.stderr and "tasks" not in done.stderr
