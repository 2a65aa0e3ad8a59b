"""Environment profiles: one pipeline YAML runs on the embedded broker, in Compose and in production.

`STYLUS_PROFILE` names a profile (`local`, `compose`, `production`: `configs/profiles/<name>.yaml`)
or is a path to a profile file. A profile supplies librdkafka settings (bootstrap servers, security)
and defaults for what a pipeline leaves unset (state directory, backup URI). Precedence for the
bootstrap servers: env `STYLUS_BOOTSTRAP_SERVERS` > pipeline YAML > profile > the embedded broker;
for other settings: our defaults < profile < pipeline `kafka:` < processor `kafka:`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from stylus.config.env import expand_env
from stylus.config.model import BackupSpec, Pipeline, ProcessorSpec
from stylus.config.secrets import KafkaSettings

PROFILE_ENV = "STYLUS_PROFILE"
PROFILES_DIR_ENV = "STYLUS_PROFILES_DIR"
#: The source tree's profiles; the container image keeps the tree at /app, so this resolves there too.
BUILTIN_DIR = Path(__file__).resolve().parents[2] / "configs" / "profiles"


class ProfileError(ValueError):
    """The selected profile cannot be found or is not valid."""


class ProfileDefaults(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dir: str | None = None
    backup_uri: str | None = Field(None, pattern=r"^(file|hdfs|webhdfs)://")
    backup_interval: str | None = None


class Profile(BaseModel):
    """One environment's settings; `kafka` holds librdkafka settings by their dotted names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    description: str = ""
    kafka: KafkaSettings = Field(default_factory=dict)  # secrets held (stylus/config/secrets.py)
    defaults: ProfileDefaults = ProfileDefaults()

    @property
    def bootstrap(self) -> str | None:
        value = self.kafka.get("bootstrap.servers")
        return str(value) if value else None


def profile_dirs() -> list[Path]:
    """Where profile names are looked up: `$STYLUS_PROFILES_DIR`, `./configs/profiles`, the built-ins."""
    dirs: list[Path] = []
    if os.environ.get(PROFILES_DIR_ENV):
        dirs.append(Path(os.environ[PROFILES_DIR_ENV]))
    dirs.extend([Path.cwd() / "configs" / "profiles", BUILTIN_DIR])
    return dirs


def find_profile(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        path = Path(name)
        if path.is_file():
            return path
        raise ProfileError(f"{PROFILE_ENV}={name}: no such profile file")
    for directory in profile_dirs():
        path = directory / f"{name}.yaml"
        if path.is_file():
            return path
    known = sorted({p.stem for d in profile_dirs() if d.is_dir() for p in d.glob("*.yaml")})
    raise ProfileError(f"{PROFILE_ENV}={name}: unknown profile; known profiles: {', '.join(known) or 'none'}")


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, env_key: tuple[tuple[str, str], ...]) -> Profile:
    del mtime_ns  # part of the cache key only
    text = expand_env(Path(path).read_text(), dict(env_key))
    try:
        return Profile.model_validate(yaml.safe_load(text) or {})
    except ValueError as exc:
        raise ProfileError(f"profile {path} is not valid: {exc}") from exc


def load_profile(name: str) -> Profile:
    """A profile by name or path, with `${VAR}` expanded from the environment."""
    path = find_profile(name)
    return _load(str(path), path.stat().st_mtime_ns, tuple(sorted(os.environ.items())))


def active_profile() -> Profile | None:
    """The profile `STYLUS_PROFILE` selects, or None when it is unset (plain defaults)."""
    name = os.environ.get(PROFILE_ENV, "").strip()
    return load_profile(name) if name else None


def profile_kafka() -> dict[str, Any]:
    """The active profile's librdkafka settings (empty without a profile)."""
    profile = active_profile()
    return dict(profile.kafka) if profile is not None else {}


def apply_profile_defaults(pipeline: Pipeline, profile: Profile | None = None) -> Pipeline:
    """Fill what the pipeline leaves unset from the profile: each processor's state dir, and a backup
    for stateful processors. Anything written in the YAML wins."""
    profile = profile if profile is not None else active_profile()
    if profile is None:
        return pipeline
    defaults = profile.defaults
    changed: dict[str, ProcessorSpec] = {}
    for name, spec in pipeline.processors.items():
        update: dict[str, Any] = {}
        if defaults.state_dir and "dir" not in spec.state.model_fields_set:
            update["dir"] = defaults.state_dir
        if defaults.backup_uri and spec.stateful and spec.state.backup is None and spec.state.backend == "rocksdb":
            backup: dict[str, Any] = {"uri": defaults.backup_uri}
            if defaults.backup_interval:
                backup["interval"] = defaults.backup_interval
            update["backup"] = BackupSpec.model_validate(backup)
        if update:
            state = spec.state.model_copy(update=update)
            changed[name] = spec.model_copy(update={"state": state})
    if not changed:
        return pipeline
    return pipeline.model_copy(update={"processors": {**pipeline.processors, **changed}})
