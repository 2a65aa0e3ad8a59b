"""`stylus deploy k8s`: manifests valid against the Kubernetes schemas (kubernetes-validate ships
them: offline), a Deployment per stateless processor, a StatefulSet with a claim per stateful one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from stylus.config import load_pipeline
from stylus.deploy.common import PIPELINE_MOUNT, DeployOptions
from stylus.deploy.k8s import render_k8s
from tests.deploy.conftest import TRENDING
from tests.support.cli import run_stylus

K8S_VERSION = "1.30.0"


def render(path: Path, *args: str) -> list[dict[str, Any]]:
    result = run_stylus("deploy", "k8s", str(path), *args)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    return docs


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.mark.parametrize("which", ["fixture", "trending"])
def test_workloads(which: str, fixture_pipeline: Path) -> None:
    path = fixture_pipeline if which == "fixture" else TRENDING
    pipeline = load_pipeline(path)
    docs = by_kind(render(path))
    base = pipeline.pipeline
    config_map = docs[("ConfigMap", f"{base}-pipeline")]
    assert config_map["data"]["pipeline.yaml"] == path.read_text()
    kinds = {"Deployment": 0, "StatefulSet": 0}
    for name, spec in pipeline.processors.items():
        workload_name = f"{base}-{name}".replace("_", "-")
        kind = "StatefulSet" if spec.stateful else "Deployment"
        kinds[kind] += 1
        workload = docs[(kind, workload_name)]
        service = docs[("Service", workload_name)]
        body = workload["spec"]
        assert body["replicas"] == spec.replicas
        template = body["template"]
        assert body["selector"]["matchLabels"] == template["metadata"]["labels"] == service["spec"]["selector"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9400"
        pod = template["spec"]
        assert pod["terminationGracePeriodSeconds"] >= max(30, 2 * spec.checkpoint.interval + 10)
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["args"] == [PIPELINE_MOUNT, "--processor", name, "--metrics-port", "9400",
                                     "--metrics-host", "0.0.0.0"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
        assert set(container["resources"]["requests"]) == {"cpu", "memory"}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["STYLUS_PROFILE"] == "production"
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["pipeline"]["mountPath"] == PIPELINE_MOUNT and mounts["pipeline"]["subPath"] == "pipeline.yaml"
        assert mounts["state"]["mountPath"] == "/var/lib/stylus/state"
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["pipeline"]["configMap"]["name"] == config_map["metadata"]["name"]
        if spec.stateful:
            assert body["serviceName"] == service["metadata"]["name"]
            assert service["spec"]["clusterIP"] == "None"
            (claim,) = body["volumeClaimTemplates"]
            assert claim["metadata"]["name"] == "state" and "state" not in volumes
            assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
            assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
        else:
            assert volumes["state"] == {"name": "state", "emptyDir": {}}
    assert kinds == {"Deployment": sum(not s.stateful for s in pipeline.processors.values()),
                     "StatefulSet": sum(s.stateful for s in pipeline.processors.values())}
    assert len(docs) == 1 + 2 * len(pipeline.processors)


def test_options(fixture_pipeline: Path) -> None:
    docs = by_kind(render(fixture_pipeline, "--namespace", "streams", "--image", "reg.example/stylus:2",
                          "--storage", "50Gi", "--storage-class", "fast", "--kafka-bootstrap", "k1:9092,k2:9092"))
    sts = docs[("StatefulSet", "deploy-fixture-counter")]
    assert all(d["metadata"]["namespace"] == "streams" for d in docs.values())
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "50Gi" and claim["storageClassName"] == "fast"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg.example/stylus:2"
    assert {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "k1:9092,k2:9092"} in container["env"]


def test_pipeline_change_rolls_the_pods(fixture_pipeline: Path) -> None:
    pipeline = load_pipeline(fixture_pipeline)
    text = fixture_pipeline.read_text()

    def checksum(source: str) -> str:
        docs = list(yaml.safe_load_all(render_k8s(pipeline, source, DeployOptions())))
        return str(docs[-1]["spec"]["template"]["metadata"]["annotations"]["stylus.io/pipeline-checksum"])

    assert checksum(text) == checksum(text)
    assert checksum(text) != checksum(text.replace("words}", "words2}"))


def test_validator_is_real(fixture_pipeline: Path) -> None:
    """kubernetes-validate rejects a broken manifest (so passing above means something)."""
    docs = render(fixture_pipeline)
    broken = next(d for d in docs if d["kind"] == "StatefulSet")
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
