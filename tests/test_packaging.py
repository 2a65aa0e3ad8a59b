"""`pip install .` with no extras, in a fresh virtualenv (no system site-packages): the core validates and
runs a stateless and a RocksDB pipeline on a real broker; the commands needing an extra name it and exit
non-zero without a traceback. The venv is built once per module from pip's wheel cache (~10-20 s)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from stylus.extras import EXTRAS
from tests.conftest import PipelineFactory
from tests.support.cli import ROOT
from tests.support.kafka import produce, read_json

#: top-level modules only the extras install (stylus/extras.py)
EXTRA_MODULES = ("pyspark", "pyarrow", "pandas", "hdfs", "psycopg", "grafanalib", "numpy", "matplotlib", "sqlglot",
                 "polars", "uvicorn", "httptools", "uvloop")

UPPER = '''
from stylus import Processor


class Upper(Processor):
    def process(self, record, ctx):
        ctx.emit({"word": record.value["word"].upper()}, key=record.key)
'''

PIPELINE = {
    "pipeline": "core",
    "topics": {"words": {"partitions": 2}, "upper": {"partitions": 2}, "counts": {"partitions": 2}},
    "processors": {
        "upper": {"class": "core_app:Upper", "inputs": ["words"], "outputs": ["upper"],
                  "semantics": {"output": "at_least_once"}},
        "counter": {"class": "processors.counter:CounterNode", "inputs": ["upper"], "outputs": ["counts"],
                    "config": {"window": "1h"}, "semantics": {"state": "exactly_once", "output": "at_least_once"},
                    "checkpoint": {"interval": "200ms"}},
    },
}


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH or active venv leaking the repository's packages into the fresh one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """bin/ of a fresh venv holding `pip install .` (no extras). The source is copied first, so the build
    leaves nothing in the repository and is not disturbed by edits made meanwhile."""
    base = tmp_path_factory.mktemp("core-venv")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("stylus", "processors"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = base / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=clean_env())
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(src)],
                             capture_output=True, text=True, timeout=600, env=clean_env())
    assert install.returncode == 0, install.stdout + install.stderr
    print(f"core venv built in {time.monotonic() - started:.1f} s")
    yield venv / "bin"


def stylus(bin_dir: Path, *args: str, cwd: Path, timeout: float = 120,
           **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "stylus"), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=clean_env(**env))


def test_the_extras_are_declared_and_all_of_them_is_all() -> None:
    """Every extra `require` may name is in pyproject.toml, and `all` (what `make install` adds) lists them all."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    (everything,) = declared["all"]
    assert everything.startswith("stylus[") and everything.endswith("]")
    assert set(everything[len("stylus["):-1].split(",")) == set(declared) - {"all", "dev"}
    assert "'.[all,dev]'" in (ROOT / "Makefile").read_text()


def test_the_core_install_has_no_extra(core_venv: Path) -> None:
    probe = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m)))"
    found = subprocess.run([str(core_venv / "python"), "-c", probe, *EXTRA_MODULES], capture_output=True,
                           text=True, timeout=60, env=clean_env(), check=True).stdout.split()
    assert found == []


def test_validate_in_the_core(core_venv: Path, tmp_path: Path) -> None:
    (tmp_path / "core_app.py").write_text(UPPER)
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump(PIPELINE))
    for pipeline in (path, ROOT / "pipelines" / "trending_events.yaml", ROOT / "pipelines" / "event_counts.yaml"):
        result = stylus(core_venv, "validate", str(pipeline), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "is valid" in result.stdout


@pytest.mark.parametrize(("command", "extra", "what"), [
    (["backfill", "PIPELINE", "--processor", "scorer", "--from", "earliest"], "spark", "Spark"),
    (["replay", "PIPELINE", "--processor", "scorer", "--shadow", "s"], "spark", "Spark"),
    (["dashboard", "PIPELINE"], "grafana", "grafanalib"),
    (["demo", "--duration", "1"], "demo", "numpy"),
    (["serve", "PIPELINE"], "serve", "uvicorn, httptools and uvloop (its HTTP server)"),
])
def test_commands_name_the_missing_extra(core_venv: Path, tmp_path: Path, command: list[str], extra: str,
                                         what: str) -> None:
    args = [str(ROOT / "pipelines" / "trending_events.yaml") if a == "PIPELINE" else a for a in command]
    result = stylus(core_venv, *args, cwd=tmp_path)
    assert result.returncode != 0
    assert f"stylus {command[0]} needs {what}: pip install 'stylus[{extra}]'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_settings_name_the_missing_extra(core_venv: Path, tmp_path: Path) -> None:
    """A setting needing an extra is refused by `validate` (and so by `run`) with the extra in the fix."""
    result = stylus(core_venv, "validate", str(ROOT / "pipelines" / "event_counts.yaml"), cwd=tmp_path,
                    STYLUS_STATE_BACKEND="postgres")
    assert result.returncode == 2
    assert "processors.counter.state.backend: state backend `postgres` needs PostgreSQL" in result.stderr
    assert "fix: pip install 'stylus[postgres]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_sql_processor_names_the_missing_extra(core_venv: Path, tmp_path: Path) -> None:
    """Loading a `sql:` app needs sqlglot: `validate` (and so `run`) says which extra to install."""
    result = stylus(core_venv, "validate", str(ROOT / "pipelines" / "top_events.yaml"), cwd=tmp_path)
    assert result.returncode == 2
    assert "processors.top_events.sql: a `sql:` processor needs sqlglot, which is not installed" in result.stderr
    assert "fix: pip install 'stylus[sql]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_in_the_core(core_venv: Path, tmp_path: Path, bootstrap: str,
                         pipeline_factory: PipelineFactory) -> None:
    """A stateless stage and a RocksDB one, on the real broker, with nothing but the core installed."""
    (tmp_path / "core_app.py").write_text(UPPER)
    path, pipeline = pipeline_factory(PIPELINE)
    words, counts = pipeline.processors["upper"].inputs[0], pipeline.processors["counter"].outputs[0]
    produce(bootstrap, words, [(f"w{i % 5}", {"word": f"w{i % 5}"}) for i in range(100)])
    result = stylus(core_venv, "run", str(path), "--exit-when-idle", "1", cwd=tmp_path,
                    STYLUS_BOOTSTRAP_SERVERS=bootstrap)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "upper: processed 100 records" in result.stdout, result.stdout + result.stderr[-2000:]
    assert "counter: processed 100 records" in result.stdout, result.stdout + result.stderr[-2000:]
    assert max(value["count"] for value in read_json(bootstrap, counts)) >= 20  # a RocksDB count per window
