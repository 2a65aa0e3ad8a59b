"""`stylus backup list` and `stylus backup restore` against backups a real run made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from stylus.cli.main import cli
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.runtime.runner import PipelineRunner
from stylus.state.backup.manager import local_offset
from tests.state.helpers import read_state
from tests.support.kafka import produce


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_stylus(*args: str, bootstrap: str) -> _Result:
    """In-process (click's runner): `python -m stylus.cli.main` is hit by a circular import elsewhere."""
    result = CliRunner().invoke(cli, list(args), env={"STYLUS_BOOTSTRAP_SERVERS": bootstrap})
    return _Result(result.exit_code, result.stdout, result.stderr)


def test_list_and_restore(pipeline_factory: Any, bootstrap: str, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory({
        "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "at_least_once"}, "checkpoint": {"interval": "200ms"},
            "state": {"backup": {"uri": f"file://{tmp_path / 'backups'}", "interval": "200ms", "keep": 2}},
        }},
    })
    words = pipeline.processors["counter"].inputs[0]
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)  # before producing: no auto-created topic
    produce(bootstrap, words, [(f"k{i % 30}", {"i": i}) for i in range(900)])
    assert PipelineRunner(pipeline, bootstrap, ["counter"], exit_when_idle=2).run(install_signals=False) == 0
    store_dir = tmp_path / "state" / pipeline.pipeline / "counter"
    local = {p: local_offset(store_dir / f"{words}-{p}") for p in range(2)}
    before = read_state(store_dir)
    assert sum(before.values()) == 900

    listed = run_stylus("backup", "list", str(path), "--processor", "counter", "--json", bootstrap=bootstrap)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {r["partition"] for r in rows} == {0, 1}
    newest = {p: max((r for r in rows if r["partition"] == p), key=lambda r: r["id"]) for p in (0, 1)}
    assert {p: newest[p]["offset"] for p in (0, 1)} == local  # the idle instance backed up its final state
    text = run_stylus("backup", "list", str(path), "--processor", "counter", bootstrap=bootstrap)
    assert newest[0]["id"] in text.stdout and f"{words}[1]" in text.stdout

    shutil.rmtree(store_dir)
    restored = run_stylus("backup", "restore", str(path), "--processor", "counter", bootstrap=bootstrap)
    assert restored.returncode == 0, restored.stderr
    assert f"{words}[0]: restored {newest[0]['id']}" in restored.stdout and "local state was missing" in restored.stdout
    assert read_state(store_dir) == before

    older = min((r for r in rows if r["partition"] == 1), key=lambda r: r["id"])
    one = run_stylus("backup", "restore", str(path), "--processor", "counter", "--partition", "1", "--backup",
                     older["id"], bootstrap=bootstrap)
    assert one.returncode == 0, one.stderr
    assert local_offset(store_dir / f"{words}-1") == older["offset"]

    bad = run_stylus("backup", "restore", str(path), "--processor", "nope", bootstrap=bootstrap)
    assert bad.returncode != 0 and "no processor `nope`" in bad.stderr
