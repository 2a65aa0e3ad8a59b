"""`stylus deploy k8s`: Kubernetes manifests, one workload per processor.

A stateless processor is a Deployment; a stateful one a StatefulSet whose pods each get their own
PersistentVolumeClaim for RocksDB. Every processor has a headless Service (the StatefulSet's
governing service, and a target for Prometheus), scrape annotations, probes on /readyz and
/healthz, and a termination grace period long enough for the final checkpoint. The pipeline YAML
travels in a ConfigMap; its checksum is a pod annotation, so changing the pipeline rolls the pods.
"""

from __future__ import annotations

import hashlib
from typing import Any

from stylus.config.model import Pipeline
from stylus.config.profiles import load_profile
from stylus.deploy.common import (
    PIPELINE_MOUNT,
    DeployError,
    DeployOptions,
    app_files,
    container_command,
    container_env,
    dns_name,
    dump_all,
    grace_seconds,
    label_value,
    state_mount,
)

APP = "stylus"
USER_ID = 10001  # the image's `stylus` user


def _meta(name: str, labels: dict[str, str], options: DeployOptions,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if options.namespace:
        meta["namespace"] = options.namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


def _labels(pipeline: Pipeline, processor: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": label_value(pipeline.pipeline)}
    if processor is not None:
        labels["app.kubernetes.io/component"] = label_value(processor)
    return labels


def _scrape(options: DeployOptions) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(options.metrics_port),
            "prometheus.io/path": "/metrics"}


def config_map(pipeline: Pipeline, pipeline_text: str, options: DeployOptions) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(config_map_name(pipeline), _labels(pipeline), options),
        "data": {"pipeline.yaml": pipeline_text, **{f.key: f.text for f in app_files(pipeline)}},
    }


def config_map_name(pipeline: Pipeline) -> str:
    return dns_name(pipeline.pipeline, "pipeline", limit=253)


def workload_name(pipeline: Pipeline, processor: str) -> str:
    return dns_name(pipeline.pipeline, processor)


def _container(pipeline: Pipeline, pipeline_text: str, name: str, options: DeployOptions,
               profile_name: str) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10, "timeoutSeconds": 5,
             "failureThreshold": 3, "initialDelaySeconds": 30}
    resources: dict[str, Any] = {
        "requests": {"cpu": options.cpu_request, "memory": options.memory_request},
        "limits": {"memory": options.memory_limit},
    }
    profile = load_profile(profile_name)
    env = container_env(profile_name, profile)
    mount = state_mount(pipeline_text, name, env, profile)
    return {
        "name": "processor",
        "image": options.image,
        "args": container_command(name, options.metrics_port),
        "env": [{"name": key, "value": value} for key, value in env.items()]
        + [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": options.kafka_bootstrap}],
        "ports": [{"name": "metrics", "containerPort": options.metrics_port, "protocol": "TCP"}],
        "readinessProbe": {**probe, "httpGet": {"path": "/readyz", "port": "metrics"}, "initialDelaySeconds": 5},
        "livenessProbe": probe,
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "pipeline", "mountPath": PIPELINE_MOUNT, "subPath": "pipeline.yaml", "readOnly": True},
            *({"name": "pipeline", "mountPath": f.target, "subPath": f.key, "readOnly": True}
              for f in app_files(pipeline)),  # the SQL apps it names, next to it
            {"name": "state", "mountPath": mount},
        ],
    }


def _pod_template(pipeline: Pipeline, pipeline_text: str, name: str, options: DeployOptions,
                  profile_name: str, checksum: str) -> dict[str, Any]:
    spec = pipeline.processors[name]
    volumes: list[dict[str, Any]] = [{"name": "pipeline", "configMap": {"name": config_map_name(pipeline)}}]
    if not spec.stateful:
        volumes.append({"name": "state", "emptyDir": {}})
    return {
        "metadata": {
            "labels": _labels(pipeline, name),
            "annotations": {**_scrape(options), "stylus.io/pipeline-checksum": checksum},
        },
        "spec": {
            "terminationGracePeriodSeconds": grace_seconds(spec),
            "securityContext": {"runAsNonRoot": True, "runAsUser": USER_ID, "runAsGroup": USER_ID,
                                "fsGroup": USER_ID},
            "containers": [_container(pipeline, pipeline_text, name, options, profile_name)],
            "volumes": volumes,
        },
    }


def _service(pipeline: Pipeline, name: str, options: DeployOptions) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(workload_name(pipeline, name), _labels(pipeline, name), options, _scrape(options)),
        "spec": {
            "clusterIP": "None",
            "selector": _labels(pipeline, name),
            "ports": [{"name": "metrics", "port": options.metrics_port, "targetPort": "metrics"}],
        },
    }


def _workload(pipeline: Pipeline, pipeline_text: str, name: str, options: DeployOptions, profile_name: str,
              checksum: str) -> dict[str, Any]:
    spec = pipeline.processors[name]
    labels = _labels(pipeline, name)
    body: dict[str, Any] = {
        "replicas": spec.replicas,
        "selector": {"matchLabels": labels},
        "template": _pod_template(pipeline, pipeline_text, name, options, profile_name, checksum),
    }
    if not spec.stateful:
        body["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}
        kind = "Deployment"
    else:
        kind = "StatefulSet"
        body["serviceName"] = workload_name(pipeline, name)
        body["podManagementPolicy"] = "Parallel"
        body["updateStrategy"] = {"type": "RollingUpdate"}
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": options.storage}},
        }
        if options.storage_class:
            claim["storageClassName"] = options.storage_class
        body["volumeClaimTemplates"] = [{"metadata": {"name": "state", "labels": labels}, "spec": claim}]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": _meta(workload_name(pipeline, name), labels, options),
        "spec": body,
    }


def render_k8s_docs(pipeline: Pipeline, pipeline_text: str, options: DeployOptions | None = None
                    ) -> list[dict[str, Any]]:
    """The manifests as data: the ConfigMap, then per processor its Service and its workload."""
    options = options or DeployOptions()
    profile_name = options.profile or "production"
    names = pipeline.topological_order()
    taken: dict[str, str] = {}
    for name in names:
        other = taken.setdefault(workload_name(pipeline, name), name)
        if other != name:
            raise DeployError(f"processors `{other}` and `{name}` map to the same Kubernetes name "
                              f"`{workload_name(pipeline, name)}`; rename one")
    checksum = hashlib.sha256("".join([pipeline_text, *(f.text for f in app_files(pipeline))]).encode()
                              ).hexdigest()[:16]
    docs = [config_map(pipeline, pipeline_text, options)]
    for name in names:
        docs.append(_service(pipeline, name, options))
        docs.append(_workload(pipeline, pipeline_text, name, options, profile_name, checksum))
    return docs


def render_k8s(pipeline: Pipeline, pipeline_text: str, options: DeployOptions | None = None) -> str:
    header = f"# Rendered by `stylus deploy k8s` for pipeline {pipeline.pipeline}.\n"
    return header + dump_all(render_k8s_docs(pipeline, pipeline_text, options))
