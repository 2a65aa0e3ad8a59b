"""docker/Dockerfile: lint-clean under hadolint, non-root, state volume, healthcheck, `stylus run`
entrypoint, and dependencies pinned to what the venv runs."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

from stylus.deploy.common import STATE_DIR
from stylus.deploy.lock import locks
from tests.deploy.conftest import ROOT, tool

DOCKERFILE = ROOT / "docker" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    start = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[start:]


def test_hadolint_clean() -> None:
    result = subprocess.run([tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_processor_image() -> None:
    steps = instructions()
    assert steps[0][0] == "FROM" and steps[0][1].startswith("python:3.11.") and "-slim" in steps[0][1]
    final = dict(final_stage())
    assert final["FROM"] == "base AS runtime"
    assert final["USER"] == "10001:10001"  # numeric, so Kubernetes runAsNonRoot can verify it
    assert json.loads(final["VOLUME"]) == [STATE_DIR]
    assert json.loads(final["ENTRYPOINT"]) == ["stylus", "run"]
    assert final["HEALTHCHECK"].endswith('CMD ["python", "-m", "stylus.deploy.healthcheck"]')
    run_steps = [args for word, args in steps if word == "RUN"]
    assert any(s.startswith("pip install --no-deps -r docker/requirements.lock") for s in run_steps)


def test_lock_matches_the_venv() -> None:
    """Every pin is the version installed here (the one the tests ran), and nothing is left out."""
    check = subprocess.run([sys.executable, "-m", "stylus.deploy.lock", "--check"], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    assert check.returncode == 0, check.stderr
    rendered = locks()
    for name in ("requirements.lock", "requirements-spark.lock"):
        assert (ROOT / "docker" / name).read_text() == rendered[name]
    pins = dict(line.split("==") for line in rendered["requirements.lock"].splitlines()
                if "==" in line and not line.startswith("#") and not line.startswith("setuptools"))
    for name, version in pins.items():
        assert metadata.version(name) == version, name
    for needed in ("confluent-kafka", "rocksdict", "pydantic", "click", "prometheus-client", "psycopg-binary"):
        assert needed in pins, needed
    assert "pyspark" not in pins and "pytest" not in pins
    assert "pyspark==" in rendered["requirements-spark.lock"]
