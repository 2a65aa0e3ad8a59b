"""The first errors a user meets, through the real CLI: one clear line, a non-zero exit, in seconds."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus, stylus_env
from tests.support.net import closed_port

DOC = {
    "pipeline": "errs",
    "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
    "processors": {"counter": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"]}},
}


def _env(**extra: str) -> dict[str, str]:
    env = stylus_env(None, **extra)
    for name in ("STYLUS_BOOTSTRAP_SERVERS", "STYLUS_PROFILE", "STYLUS_DEBUG"):
        if name not in extra:
            env.pop(name, None)
    return env


def _write(tmp_path: Path, doc: dict[str, object]) -> Path:
    path = tmp_path / "errs.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_run_against_a_closed_port_says_so_in_one_line_within_ten_seconds(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    path = _write(tmp_path, DOC)
    began = time.monotonic()
    result = run_stylus("run", str(path), env=_env(STYLUS_BOOTSTRAP_SERVERS=address), timeout=30)
    elapsed = time.monotonic() - began
    assert result.returncode == 1, result.stderr
    assert elapsed < 10, elapsed
    lines = (result.stdout + result.stderr).splitlines()
    assert len(lines) == 1, lines  # no client log flood, no traceback
    assert lines[0].startswith(f"error: cannot reach Kafka at {address} (bootstrap.servers from the environment "
                               "variable STYLUS_BOOTSTRAP_SERVERS): ")
    assert "Connection refused" in lines[0]


def test_the_error_names_the_yaml_or_the_profile_that_set_the_servers(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    path = _write(tmp_path, {**DOC, "kafka": {"bootstrap.servers": address}})
    result = run_stylus("run", str(path), env=_env(), timeout=30)
    assert result.returncode == 1
    assert f"cannot reach Kafka at {address} (bootstrap.servers from `kafka.bootstrap.servers` in {path})" \
        in result.stderr
    profile = tmp_path / "far.yaml"
    profile.write_text(f"profile: far\nkafka: {{bootstrap.servers: '{address}'}}\n")
    result = run_stylus("topics", "create", str(_write(tmp_path, DOC)), env=_env(STYLUS_PROFILE=str(profile)),
                        timeout=30)
    assert result.returncode == 1
    assert f"(bootstrap.servers from the profile {profile} (selected by STYLUS_PROFILE={profile}))" in result.stderr


def test_verbose_shows_the_clients_own_log(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = run_stylus("-v", "run", str(_write(tmp_path, DOC)), env=_env(STYLUS_BOOTSTRAP_SERVERS=address),
                        timeout=30)
    assert result.returncode == 1
    client = [line for line in result.stderr.splitlines() if "stylus.kafka.client" in line]
    assert client and all("Connection refused" in line or "Connect" in line or "down" in line for line in client)


def test_validate_without_a_reachable_broker_still_validates_the_yaml(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = run_stylus("validate", str(_write(tmp_path, DOC)), env=_env(STYLUS_BOOTSTRAP_SERVERS=address),
                        timeout=30)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout
    assert f"note: topics not checked against the cluster: cannot reach Kafka at {address}" in result.stderr


def test_an_unwritable_state_dir_names_the_setting_and_the_path(bootstrap: str, pipeline_factory: PipelineFactory,
                                                                 tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory should be")
    path, _ = pipeline_factory({**DOC, "processors": {"counter": {**DOC["processors"]["counter"],
                                                                  "state": {"dir": str(blocker / "state")}}}})
    result = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=60)
    assert result.returncode == 1, result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: processors.counter.state.dir: cannot write the state directory "
                                f"{blocker / 'state'} (Not a directory")
    assert f"set in {path}" in errors[0] and "fix: point `state.dir` of `counter` at a directory" in errors[0]
    assert "Traceback" not in result.stderr and "processed" not in result.stdout
