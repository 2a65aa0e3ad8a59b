"""`stylus deploy compose`: valid under the real Compose v2 binary, and the right services inside."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import load_pipeline
from stylus.deploy.common import PIPELINE_MOUNT, DeployError, DeployOptions
from stylus.deploy.compose import INFRA_SERVICES, render_compose
from tests.deploy.conftest import TRENDING, compose_binary
from tests.support.cli import run_stylus


def compose_config(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([compose_binary(), "-f", str(path), "config", *extra], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd=path.parent)


def render_and_check(pipeline_file: Path, tmp_path: Path) -> dict[str, Any]:
    """Render with the CLI, validate with `compose config -q`, return Compose's own normalised model."""
    out = tmp_path / "compose.yaml"
    result = run_stylus("deploy", "compose", str(pipeline_file), "--output", str(out))
    assert result.returncode == 0, result.stderr
    quiet = compose_config(out, "-q")
    assert quiet.returncode == 0, quiet.stderr
    normalised = compose_config(out, "--format", "json")
    assert normalised.returncode == 0, normalised.stderr
    return json.loads(normalised.stdout)


def expected_command(name: str, port: int = 9400) -> list[str]:
    return [PIPELINE_MOUNT, "--processor", name, "--metrics-port", str(port), "--metrics-host", "0.0.0.0"]


@pytest.mark.parametrize("which", ["fixture", "trending"])
def test_processor_services(which: str, fixture_pipeline: Path, tmp_path: Path) -> None:
    path = fixture_pipeline if which == "fixture" else TRENDING
    pipeline = load_pipeline(path)
    model = render_and_check(path, tmp_path)
    services = model["services"]
    assert set(services) == set(pipeline.processors) | set(INFRA_SERVICES)
    for name, spec in pipeline.processors.items():
        service = services[name]
        assert service["command"] == expected_command(name)
        assert service["image"] == "stylus:latest"
        assert service["deploy"]["replicas"] == spec.replicas
        assert service["environment"]["STYLUS_PROFILE"] == "compose"
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert service["healthcheck"]["test"] == ["CMD", "python", "-m", "stylus.deploy.healthcheck",
                                                  "--port", "9400"]
        assert service["configs"] == [{"source": "pipeline", "target": PIPELINE_MOUNT}]
        # stop_grace_period comes back in Go duration form ("50s", "1m0s")
        grace = service["stop_grace_period"]
        seconds = int(grace.rstrip("s").split("m")[-1]) + (60 * int(grace.split("m")[0]) if "m" in grace else 0)
        assert seconds >= max(30, 2 * spec.checkpoint.interval + 10)
        if spec.stateful:
            (volume,) = service["volumes"]
            assert volume["type"] == "volume"
            assert volume["source"] == f"{name.replace('_', '-')}-state"
            assert volume["target"] == "/var/lib/stylus/state"
            assert volume["source"] in model["volumes"]
        else:
            assert "volumes" not in service
    if which == "fixture":
        assert services["pass_through"]["deploy"]["replicas"] == 3
        assert services["counter"]["deploy"]["replicas"] == 2
        assert services["counter"]["stop_grace_period"] == "50s"  # 2 x 20 s checkpoint interval + 10 s
    else:
        assert {n for n, s in pipeline.processors.items() if s.stateful} == {"scorer", "ranker"}


def test_infrastructure_and_monitoring(fixture_pipeline: Path, tmp_path: Path) -> None:
    model = render_and_check(fixture_pipeline, tmp_path)
    services = model["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    assert kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert "hadoop-namenode" in services["namenode"]["image"]
    assert "hadoop-datanode" in services["datanode"]["image"]
    assert services["spark-worker"]["command"] == ["spark://spark-master:7077"]
    assert services["spark-master"]["entrypoint"] == ["spark-class", "org.apache.spark.deploy.master.Master"]

    one_shot = services["stylus-config"]
    assert one_shot["image"] == "stylus:latest" and one_shot["entrypoint"] == ["sh", "-c"]
    (script,) = one_shot["command"]
    assert f"stylus alerts {PIPELINE_MOUNT} --output /var/lib/stylus/generated/rules/" in script
    assert f"stylus dashboard {PIPELINE_MOUNT} --output /var/lib/stylus/generated/dashboards/" in script
    for consumer in ("prometheus", "grafana"):
        assert services[consumer]["depends_on"]["stylus-config"]["condition"] == "service_completed_successfully"
        mounts = {v["source"]: v for v in services[consumer]["volumes"]}
        assert mounts["generated"]["read_only"] is True
    assert {v["source"] for v in one_shot["volumes"]} == {"generated"}


def test_embedded_configs(fixture_pipeline: Path, tmp_path: Path) -> None:
    """The pipeline travels inline, `${VAR}` intact for stylus; Prometheus scrapes every processor and
    loads the generated rules; Grafana provisions the generated dashboards."""
    pipeline = load_pipeline(fixture_pipeline)
    text = render_compose(pipeline, FIXTURE_TEXT := fixture_pipeline.read_text())
    doc = yaml.safe_load(text)
    assert doc["configs"]["pipeline"]["content"].replace("$$", "$") == FIXTURE_TEXT
    assert "$${LABEL:-words}" in doc["configs"]["pipeline"]["content"]  # Compose turns `$$` into `$`
    prometheus = yaml.safe_load(doc["configs"]["prometheus"]["content"])
    assert prometheus["rule_files"] == ["/etc/stylus-generated/rules/*.yml"]
    jobs = {j["job_name"]: j for j in prometheus["scrape_configs"]}
    assert set(jobs) == {"stylus-pass_through", "stylus-counter"}
    assert jobs["stylus-counter"]["dns_sd_configs"] == [{"names": ["counter"], "type": "A", "port": 9400}]
    providers = yaml.safe_load(doc["configs"]["grafana-dashboards"]["content"])["providers"]
    assert providers[0]["options"]["path"] == "/etc/stylus-generated/dashboards"


def test_options_and_name_clash(fixture_pipeline: Path, tmp_path: Path) -> None:
    pipeline = load_pipeline(fixture_pipeline)
    doc = yaml.safe_load(render_compose(pipeline, fixture_pipeline.read_text(),
                                        DeployOptions(image="registry.example/stylus:1.2.3", metrics_port=9500)))
    assert doc["services"]["counter"]["image"] == "${STYLUS_IMAGE:-registry.example/stylus:1.2.3}"
    assert doc["services"]["counter"]["command"] == expected_command("counter", 9500)
    clash = fixture_pipeline.read_text().replace("  counter:", "  kafka:")
    bad = tmp_path / "clash.yaml"
    bad.write_text(clash)
    with pytest.raises(DeployError, match="clash"):
        render_compose(load_pipeline(bad), clash)
    result = run_stylus("deploy", "compose", str(bad))
    assert result.returncode != 0 and "clash" in result.stderr


def test_compose_binary_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validator is real: a bad depends_on condition fails `config -q`."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  a:\n    image: x\n    depends_on: {b: {condition: finished}}\n  b: {image: y}\n")
    assert compose_config(bad, "-q").returncode != 0
