"""`stylus deploy compose`: one Compose service per processor plus everything around it.

A processor service runs the image's `stylus run` with the pipeline mounted from an inline Compose
config, so the rendered file is self-contained. Around the processors: Kafka (KRaft), an HDFS
namenode and datanode (state backups), Spark master and worker (backfills), and Prometheus and
Grafana loaded with what `stylus alerts` / `stylus dashboard` print, produced by a one-shot service
of the same image into a shared volume.
"""

from __future__ import annotations

from typing import Any

from stylus.config.model import Pipeline
from stylus.config.profiles import Profile, load_profile
from stylus.deploy.common import (
    GENERATED_DIR,
    PIPELINE_MOUNT,
    DeployError,
    DeployOptions,
    app_files,
    container_command,
    container_env,
    dns_name,
    dump_yaml,
    grace_seconds,
    state_mount,
)

KAFKA_IMAGE = "apache/kafka:3.9.1"
HADOOP_NAMENODE_IMAGE = "bde2020/hadoop-namenode:2.0.0-hadoop3.2.1-java8"
HADOOP_DATANODE_IMAGE = "bde2020/hadoop-datanode:2.0.0-hadoop3.2.1-java8"
PROMETHEUS_IMAGE = "prom/prometheus:v2.55.1"
GRAFANA_IMAGE = "grafana/grafana:11.3.1"

#: Services the renderer adds itself; a processor may not take one of these names.
INFRA_SERVICES = ("kafka", "namenode", "datanode", "spark-master", "spark-worker", "stylus-config",
                  "prometheus", "grafana")
GENERATED_MOUNT = "/etc/stylus-generated"

_HDFS_ENV = {
    "CORE_CONF_fs_defaultFS": "hdfs://namenode:9000",
    "HDFS_CONF_dfs_webhdfs_enabled": "true",
    "HDFS_CONF_dfs_permissions_enabled": "false",
    "HDFS_CONF_dfs_replication": "1",
}


def _escape(text: str) -> str:
    """Compose interpolates `$` everywhere, inline config content included: keep `${VAR}` for stylus."""
    return text.replace("$", "$$")


def pipeline_configs(pipeline: Pipeline) -> list[dict[str, str]]:
    """The pipeline YAML, and the SQL apps it names next to it, for a service that loads the pipeline."""
    return [{"source": "pipeline", "target": PIPELINE_MOUNT},
            *({"source": f.key, "target": f.target} for f in app_files(pipeline))]


def processor_service(pipeline: Pipeline, pipeline_text: str, name: str, options: DeployOptions,
                      profile: Profile | None, profile_name: str) -> dict[str, Any]:
    spec = pipeline.processors[name]
    port = options.metrics_port
    service: dict[str, Any] = {
        "image": f"${{STYLUS_IMAGE:-{options.image}}}",
        "command": container_command(name, port),
        "init": True,
        "environment": container_env(profile_name, profile),
        "configs": pipeline_configs(pipeline),
        "expose": [str(port)],
        "labels": {"io.stylus.pipeline": pipeline.pipeline, "io.stylus.processor": name},
        "deploy": {"replicas": spec.replicas},
        "stop_signal": "SIGTERM",
        "stop_grace_period": f"{grace_seconds(spec)}s",
        "healthcheck": {
            "test": ["CMD", "python", "-m", "stylus.deploy.healthcheck", "--port", str(port)],
            "interval": "10s",
            "timeout": "5s",
            "retries": 3,
            "start_period": "30s",
        },
        "depends_on": {"kafka": {"condition": "service_healthy"}},
        "restart": "unless-stopped",
    }
    if spec.stateful:
        # One volume per processor, shared by its replicas: RocksDB lives per input partition
        # ({dir}/{pipeline}/{processor}/{topic}-{partition}), so a partition that moves to another
        # replica on the same host finds its state in place.
        mount = state_mount(pipeline_text, name, container_env(profile_name, profile), profile)
        service["volumes"] = [{"type": "volume", "source": state_volume(name), "target": mount}]
        service["depends_on"]["namenode"] = {"condition": "service_started"}
    return service


def state_volume(processor: str) -> str:
    return f"{dns_name(processor, limit=200)}-state"


def _kafka() -> dict[str, Any]:
    return {
        "image": KAFKA_IMAGE,
        "environment": {
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://kafka:9092",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@kafka:9093",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
        },
        "volumes": ["kafka-data:/var/lib/kafka/data"],
        "healthcheck": {
            "test": ["CMD", "/opt/kafka/bin/kafka-broker-api-versions.sh", "--bootstrap-server", "localhost:9092"],
            "interval": "10s",
            "timeout": "10s",
            "retries": 10,
            "start_period": "20s",
        },
        "restart": "unless-stopped",
    }


def _hdfs() -> dict[str, dict[str, Any]]:
    return {
        "namenode": {
            "image": HADOOP_NAMENODE_IMAGE,
            "environment": {"CLUSTER_NAME": "stylus", **_HDFS_ENV},
            "ports": ["9870:9870"],
            "volumes": ["namenode-data:/hadoop/dfs/name"],
            "restart": "unless-stopped",
        },
        "datanode": {
            "image": HADOOP_DATANODE_IMAGE,
            "environment": {"SERVICE_PRECONDITION": "namenode:9870", **_HDFS_ENV},
            "volumes": ["datanode-data:/hadoop/dfs/data"],
            "depends_on": ["namenode"],
            "restart": "unless-stopped",
        },
    }


def _spark(pipeline: Pipeline, options: DeployOptions, profile_name: str,
           profile: Profile | None) -> dict[str, dict[str, Any]]:
    image = f"${{STYLUS_SPARK_IMAGE:-{options.spark_image}}}"
    env = {**container_env(profile_name, profile), "SPARK_NO_DAEMONIZE": "1"}
    return {
        "spark-master": {
            "image": image,
            "entrypoint": ["spark-class", "org.apache.spark.deploy.master.Master"],
            "command": ["--host", "spark-master", "--port", "7077", "--webui-port", "8080"],
            "environment": env,
            "configs": pipeline_configs(pipeline),
            "ports": ["8080:8080"],
            "restart": "unless-stopped",
        },
        "spark-worker": {
            "image": image,
            "entrypoint": ["spark-class", "org.apache.spark.deploy.worker.Worker"],
            "command": ["spark://spark-master:7077"],
            "environment": env,
            "configs": pipeline_configs(pipeline),
            "depends_on": ["spark-master"],
            "restart": "unless-stopped",
        },
    }


def generate_script(pipeline: Pipeline) -> str:
    """What the one-shot service runs: the alert rules and the dashboard, from the same image."""
    rules = f"{GENERATED_DIR}/rules/stylus.rules.yml"
    board = f"{GENERATED_DIR}/dashboards/{dns_name(pipeline.pipeline, limit=200)}.json"
    return (f"mkdir -p {GENERATED_DIR}/rules {GENERATED_DIR}/dashboards"
            f" && stylus alerts {PIPELINE_MOUNT} --output {rules}"
            f" && stylus dashboard {PIPELINE_MOUNT} --output {board}")


def _monitoring(pipeline: Pipeline, options: DeployOptions) -> dict[str, dict[str, Any]]:
    done = {"stylus-config": {"condition": "service_completed_successfully"}}
    return {
        "stylus-config": {
            "image": f"${{STYLUS_IMAGE:-{options.image}}}",
            "entrypoint": ["sh", "-c"],
            "command": [generate_script(pipeline)],
            "configs": pipeline_configs(pipeline),
            "volumes": [f"generated:{GENERATED_DIR}"],
            "restart": "no",
        },
        "prometheus": {
            "image": PROMETHEUS_IMAGE,
            "configs": [{"source": "prometheus", "target": "/etc/prometheus/prometheus.yml"}],
            "volumes": [f"generated:{GENERATED_MOUNT}:ro", "prometheus-data:/prometheus"],
            "ports": ["9090:9090"],
            "depends_on": done,
            "restart": "unless-stopped",
        },
        "grafana": {
            "image": GRAFANA_IMAGE,
            "environment": {"GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer"},
            "configs": [
                {"source": "grafana-datasource", "target": "/etc/grafana/provisioning/datasources/stylus.yaml"},
                {"source": "grafana-dashboards", "target": "/etc/grafana/provisioning/dashboards/stylus.yaml"},
            ],
            "volumes": [f"generated:{GENERATED_MOUNT}:ro", "grafana-data:/var/lib/grafana"],
            "ports": ["3000:3000"],
            "depends_on": {**done, "prometheus": {"condition": "service_started"}},
            "restart": "unless-stopped",
        },
    }


def prometheus_config(pipeline: Pipeline, options: DeployOptions) -> dict[str, Any]:
    """Scrape every replica of every processor: Compose DNS answers a service name with all of them."""
    return {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": [f"{GENERATED_MOUNT}/rules/*.yml"],
        "scrape_configs": [
            {
                "job_name": f"stylus-{name}",
                "dns_sd_configs": [{"names": [name], "type": "A", "port": options.metrics_port}],
                "relabel_configs": [{"target_label": "processor", "replacement": name}],
            }
            for name in pipeline.topological_order()
        ],
    }


def _grafana_configs() -> dict[str, str]:
    datasource = {
        "apiVersion": 1,
        "datasources": [{"name": "Prometheus", "type": "prometheus", "access": "proxy",
                         "url": "http://prometheus:9090", "isDefault": True}],
    }
    dashboards = {
        "apiVersion": 1,
        "providers": [{"name": "stylus", "folder": "Stylus", "type": "file",
                       "options": {"path": f"{GENERATED_MOUNT}/dashboards"}}],
    }
    return {"grafana-datasource": dump_yaml(datasource), "grafana-dashboards": dump_yaml(dashboards)}


def render_compose_doc(pipeline: Pipeline, pipeline_text: str, options: DeployOptions | None = None
                       ) -> dict[str, Any]:
    """The Compose document as data (see `render_compose` for the text)."""
    options = options or DeployOptions()
    profile_name = options.profile or "compose"
    profile = load_profile(profile_name)
    clash = sorted(set(pipeline.processors) & set(INFRA_SERVICES))
    if clash:
        raise DeployError(f"processor name(s) {clash} clash with the services the Compose file adds "
                          f"({', '.join(INFRA_SERVICES)}); rename the processor")
    services: dict[str, Any] = {"kafka": _kafka()}
    for name in pipeline.topological_order():
        services[name] = processor_service(pipeline, pipeline_text, name, options, profile, profile_name)
    services.update(_hdfs())
    services.update(_spark(pipeline, options, profile_name, profile))
    services.update(_monitoring(pipeline, options))
    volumes = ["kafka-data", "namenode-data", "datanode-data", "generated", "prometheus-data", "grafana-data"]
    volumes += [state_volume(n) for n in pipeline.topological_order() if pipeline.processors[n].stateful]
    configs = {
        "pipeline": {"content": _escape(pipeline_text)},
        **{f.key: {"content": _escape(f.text)} for f in app_files(pipeline)},
        "prometheus": {"content": dump_yaml(prometheus_config(pipeline, options))},
        **{key: {"content": text} for key, text in _grafana_configs().items()},
    }
    return {
        "name": dns_name(pipeline.pipeline, limit=200),
        "services": services,
        "volumes": {v: {} for v in volumes},
        "configs": configs,
    }


def render_compose(pipeline: Pipeline, pipeline_text: str, options: DeployOptions | None = None) -> str:
    header = (f"# Rendered by `stylus deploy compose` for pipeline {pipeline.pipeline}; re-render after editing\n"
              "# the pipeline YAML. Images: STYLUS_IMAGE / STYLUS_SPARK_IMAGE (see docs/deploy.md).\n")
    return header + dump_yaml(render_compose_doc(pipeline, pipeline_text, options))
