"""`state.dir` is checked before workers start: which processors need it, and what the error says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.state.preflight import StateDirUnwritable, check_state_dirs


def _pipeline(state_dir: Path, **semantics: Any) -> Pipeline:
    proc: dict[str, Any] = {"class": "tests.apps.counting:WordCount", "inputs": ["a"], "outputs": ["b"],
                            "state": {"dir": str(state_dir)}}
    if semantics:
        proc["semantics"] = semantics
    doc = {"pipeline": "pf", "topics": {"a": {}, "b": {}}, "processors": {"p": proc}}
    return parse_pipeline(yaml.safe_dump(doc), file="pf.yaml")


def test_a_writable_state_dir_is_created_for_the_processor(tmp_path: Path) -> None:
    check_state_dirs(_pipeline(tmp_path / "new" / "state"), ["p"])
    assert (tmp_path / "new" / "state" / "pf" / "p").is_dir()
    assert list((tmp_path / "new" / "state" / "pf" / "p").iterdir()) == []  # the write check leaves nothing


@pytest.mark.parametrize(("semantics", "checked"), [
    ({"state": "at_least_once", "output": "at_least_once"}, True),
    ({"output": "exactly_once"}, True),  # exactly-once output stages its checkpoints in local state
    ({"output": "at_least_once"}, False),  # stateless: never opens a database
])
def test_who_needs_a_state_dir(tmp_path: Path, semantics: dict[str, str], checked: bool) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    pipeline = _pipeline(blocker / "state", **semantics)
    if not checked:
        check_state_dirs(pipeline, ["p"])
        return
    with pytest.raises(StateDirUnwritable) as err:
        check_state_dirs(pipeline, ["p"])
    text = str(err.value)
    assert text.startswith(f"processors.p.state.dir: cannot write the state directory {blocker / 'state'} "
                           "(Not a directory")
    assert "set in pf.yaml; fix: point `state.dir` of `p` at a directory that user" in text
    assert "\n" not in text
