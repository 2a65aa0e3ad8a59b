"""What every deployment target shares: the container command, mount paths, names, grace periods.

Both renderers build plain dicts from these so the Compose file and the manifests agree on what a
processor container runs.
"""

from __future__ import annotations

import hashlib
import math
import posixpath
import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from stylus.config.env import MissingVariable, expand_env
from stylus.config.model import Pipeline, ProcessorSpec
from stylus.config.profiles import Profile

#: The image's working directory; relative state dirs in the YAML resolve against it.
WORKDIR = "/app"
#: Where the pipeline YAML is mounted in every container (Compose config / Kubernetes ConfigMap).
PIPELINE_MOUNT = "/etc/stylus/pipeline.yaml"
#: The image's state directory (a VOLUME in docker/Dockerfile; the profiles' default).
STATE_DIR = "/var/lib/stylus/state"
#: Where `stylus alerts` / `stylus dashboard` output lands for Prometheus and Grafana.
GENERATED_DIR = "/var/lib/stylus/generated"


class AppFile(BaseModel):
    """A file the pipeline YAML names besides itself (a `sql:` app, docs/sql.md), mounted in every container
    that loads the pipeline at the same path relative to it."""

    model_config = ConfigDict(frozen=True)

    key: str  # the Compose config / ConfigMap key
    target: str  # the path in the container
    text: str


def app_files(pipeline: Pipeline) -> list[AppFile]:
    """The SQL apps of the pipeline's `sql:` processors (their compiled stages say which file they came from)."""
    files: dict[str, AppFile] = {}
    for spec in pipeline.processors.values():
        sql = spec.config.get("sql") if (spec.class_ or "").startswith("stylus.sql.") else None
        if not isinstance(sql, Mapping) or not sql.get("path"):
            continue
        target = posixpath.normpath(posixpath.join(posixpath.dirname(PIPELINE_MOUNT), sql["path"]))
        if target not in files:
            with open(sql["file"], encoding="utf-8") as f:
                files[target] = AppFile(key=f"app-{len(files)}.sql", target=target, text=f.read())
    return list(files.values())


class DeployError(ValueError):
    """The pipeline cannot be rendered for this target (a name clash, a bad option)."""


class DeployOptions(BaseModel):
    """Knobs of the rendered deployment; the defaults give a working local Compose stack."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = "stylus:latest"
    spark_image: str = "stylus-spark:latest"
    metrics_port: int = Field(9400, ge=1, le=65535)
    profile: str | None = None  # None: `compose` for Compose, `production` for Kubernetes
    kafka_bootstrap: str = "kafka:9092"  # Kubernetes: handed to the production profile
    namespace: str | None = None
    storage: str = "10Gi"
    storage_class: str | None = None
    cpu_request: str = "250m"
    memory_request: str = "256Mi"
    memory_limit: str = "1Gi"


def container_command(processor: str, metrics_port: int) -> list[str]:
    """The arguments after the image's `ENTRYPOINT ["stylus", "run"]` for one processor instance.
    Metrics bind to all interfaces: Prometheus and the kubelet's probes come from outside the container."""
    return [PIPELINE_MOUNT, "--processor", processor, "--metrics-port", str(metrics_port),
            "--metrics-host", "0.0.0.0"]


def grace_seconds(spec: ProcessorSpec) -> int:
    """SIGTERM -> SIGKILL time: the batch in flight plus a final checkpoint, with room for a slow one
    (two checkpoint intervals and 10 s), never under 30 s; with `concurrency`, also the time the work in flight
    is given to complete before that checkpoint (`work_timeout`, docs/acker.md)."""
    drain = spec.work_timeout if spec.concurrency is not None else 0.0
    return max(30, math.ceil(2 * spec.checkpoint.interval + 10 + drain))


def container_env(profile_name: str, profile: Profile | None) -> dict[str, str]:
    """Environment of every stylus container. `STYLUS_STATE_DIR` is what pipelines conventionally
    write as `state: {dir: "${STYLUS_STATE_DIR:-...}"}`: it points them at the state volume."""
    state_dir = (profile.defaults.state_dir if profile is not None else None) or STATE_DIR
    return {"STYLUS_PROFILE": profile_name, "STYLUS_STATE_DIR": state_dir}


def _explicit_state_dirs(pipeline_text: str, env: Mapping[str, str]) -> dict[str, str]:
    """State dirs the YAML itself writes (a profile does not replace them), as the container expands
    them, by processor."""
    try:
        doc = yaml.safe_load(expand_env(pipeline_text, env))
    except MissingVariable as exc:
        raise DeployError(f"the pipeline needs ${{{exc.name}}} (line {exc.line}), which the containers do not "
                          f"set; give it a default: ${{{exc.name}:-...}}") from exc
    found: dict[str, str] = {}
    processors = doc.get("processors") if isinstance(doc, dict) else None
    for name, spec in (processors or {}).items():
        state = spec.get("state") if isinstance(spec, dict) else None
        if isinstance(state, dict) and isinstance(state.get("dir"), str):
            found[str(name)] = state["dir"]
    return found


def state_mount(pipeline_text: str, processor: str, env: Mapping[str, str], profile: Profile | None) -> str:
    """The state directory as the container sees it (with its environment `env`), which is where its
    volume must be mounted."""
    explicit = _explicit_state_dirs(pipeline_text, env).get(processor)
    if explicit is None:
        explicit = (profile.defaults.state_dir if profile is not None else None) or STATE_DIR
    return posixpath.normpath(posixpath.join(WORKDIR, explicit))


def dns_name(*parts: str, limit: int = 52) -> str:
    """A DNS-1123 label from the parts (lowercase, `-`), shortened with a hash when too long.
    52, not 63: a StatefulSet's name ends up in its pods' `controller-revision-hash` label."""
    raw = "-".join(parts)
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name) or "x"
    if len(name) > limit:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
        name = f"{name[: limit - 7].rstrip('-')}-{digest}"
    return name


def label_value(value: str) -> str:
    """A Kubernetes label value: at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", value)[:63].strip("-._")
    return cleaned or "x"


class _Dumper(yaml.SafeDumper):
    """Safe YAML that writes multi-line strings (embedded files) as readable `|` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and all(line == line.rstrip() for line in value.split("\n")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def dump_all(documents: list[dict[str, Any]]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
