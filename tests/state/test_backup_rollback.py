"""Rolling state back to an older backup by id: the worker keeps it (no newer backup replaces it) and
rebuilds the state up to the group's committed offset with the code it runs now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from stylus.cli.main import cli
from stylus.config.loader import load_pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.runtime.runner import PipelineRunner
from stylus.state.backup.manager import PIN_META, local_offset
from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import target_for
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.support.kafka import produce


def state_of(path: Path) -> tuple[dict[str, Any], Any]:
    store = PartitionStore(RocksKV(path))
    try:
        return dict(store.state.items()), store.meta(PIN_META)
    finally:
        store.close()


def test_restored_older_backup_is_kept_and_rebuilt(pipeline_factory: Any, bootstrap: str, tmp_path: Path) -> None:
    path, pipeline = pipeline_factory({
        "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "at_least_once"}, "checkpoint": {"interval": "200ms"},
            "state": {"backup": {"uri": f"file://{tmp_path / 'backups'}", "interval": "200ms", "keep": 5}},
        }},
    })
    words = pipeline.processors["counter"].inputs[0]
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    stores = [tmp_path / "state" / pipeline.pipeline / "counter" / f"{words}-{p}" for p in (0, 1)]
    target = target_for(f"file://{tmp_path / 'backups'}")
    repos = [PartitionBackups(target, pipeline.pipeline, "counter", words, p) for p in (0, 1)]

    def run(p: Any = pipeline) -> None:
        assert PipelineRunner(p, bootstrap, ["counter"], exit_when_idle=1).run(install_signals=False) == 0

    produce(bootstrap, words, [(f"k{i % 20}", {"i": i}) for i in range(600)])
    run()
    phase1 = [state_of(s)[0] for s in stores]
    old = [r.newest() for r in repos]
    assert [m.offset if m else None for m in old] == [local_offset(s) for s in stores]
    produce(bootstrap, words, [(f"k{i % 20}", {"i": i}) for i in range(600, 900)])
    run()
    phase2 = [state_of(s)[0] for s in stores]
    newest = [r.newest() for r in repos]
    assert all(n is not None and o is not None and n.id > o.id for n, o in zip(newest, old, strict=True))

    def restore(p: int, *extra: str) -> str:
        backup = old[p]
        assert backup is not None
        result = CliRunner().invoke(cli, ["backup", "restore", str(path), "--processor", "counter", "--partition",
                                          str(p), "--backup", backup.id, *extra],
                                    env={"STYLUS_BOOTSTRAP_SERVERS": bootstrap})
        assert result.exit_code == 0, result.output
        assert state_of(stores[p]) == (phase1[p], {"id": backup.id, "offset": backup.offset})
        return str(result.stdout)

    # partition 0: the newer backups stay; the pin alone keeps the worker from restoring the newest
    assert "dropped" not in restore(0)
    assert repos[0].manifest_ids()[0] == newest[0].id  # type: ignore[union-attr]
    # partition 1: --drop-newer deletes them too
    assert newest[1].id in restore(1, "--drop-newer", "--yes")  # type: ignore[union-attr]
    assert repos[1].manifest_ids()[0] == old[1].id  # type: ignore[union-attr]

    # the "fixed" code counts 2 per record: the records after the old backups are replayed with it
    doc = yaml.safe_load(path.read_text())
    doc["processors"]["counter"]["class"] = "tests.apps.doubling:DoubleCount"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run(load_pipeline(path))
    for p in (0, 1):
        rebuilt, pin = state_of(stores[p])
        assert pin is None  # honoured once
        assert rebuilt == {k: phase1[p].get(k, 0) + 2 * (n - phase1[p].get(k, 0)) for k, n in phase2[p].items()}
