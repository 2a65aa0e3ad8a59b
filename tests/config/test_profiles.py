"""Environment profiles (STYLUS_PROFILE): the precedence of bootstrap servers and settings, and the
defaults a profile fills into a pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from stylus.config import Pipeline, parse_pipeline
from stylus.config.profiles import ProfileError, load_profile
from stylus.kafka.settings import bootstrap_from, client_config

PIPELINE = """\
pipeline: prof
{kafka}
topics:
  a: {{partitions: 1}}
  b: {{partitions: 1}}
processors:
  stateful:
    class: tests.apps.counting:WordCount
    inputs: [a]
    outputs: [b]
    semantics: {{state: at_least_once, output: at_least_once}}
{state}
  stateless:
    class: tests.apps.counting:Passthrough
    inputs: [b]
    semantics: {{output: at_least_once}}
"""


def pipeline(kafka: str = "", state: str = "") -> Pipeline:
    return parse_pipeline(PIPELINE.format(kafka=kafka, state=state))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STYLUS_PROFILE", "STYLUS_BOOTSTRAP_SERVERS", "STYLUS_PROFILES_DIR", "KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(name, raising=False)


def test_bootstrap_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, in_yaml = pipeline(), pipeline(kafka="kafka: {bootstrap.servers: 'yaml:9092'}")
    assert bootstrap_from(plain) is None  # no profile: the embedded broker
    monkeypatch.setenv("STYLUS_PROFILE", "local")
    assert bootstrap_from(plain) is None  # the local profile: still the embedded broker
    monkeypatch.setenv("STYLUS_PROFILE", "compose")
    assert bootstrap_from(plain) == "kafka:9092"  # profile
    assert bootstrap_from(in_yaml) == "yaml:9092"  # YAML > profile
    monkeypatch.setenv("STYLUS_BOOTSTRAP_SERVERS", "env:9092")
    assert bootstrap_from(in_yaml) == "env:9092"  # env > YAML
    monkeypatch.delenv("STYLUS_BOOTSTRAP_SERVERS")
    monkeypatch.setenv("STYLUS_PROFILE", "production")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9093,k2:9093")
    assert bootstrap_from(plain) == "k1:9093,k2:9093"  # the production profile reads the environment


def test_profile_settings_sit_under_the_yaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "secure.yaml").write_text(
        "profile: secure\nkafka:\n  bootstrap.servers: s:9093\n  security.protocol: SSL\n  linger.ms: 50\n"
        "  consumer: {fetch.wait.max.ms: 100}\n")
    monkeypatch.setenv("STYLUS_PROFILES_DIR", str(tmp_path))
    monkeypatch.setenv("STYLUS_PROFILE", "secure")
    p = pipeline(kafka="kafka: {linger.ms: 7}")
    producer = client_config("producer", "given:1", p)
    assert producer["security.protocol"] == "SSL" and producer["linger.ms"] == 7  # YAML > profile
    assert producer["bootstrap.servers"] == "given:1"
    consumer = client_config("consumer", "given:1", p)
    assert consumer["fetch.wait.max.ms"] == 100  # profile > our defaults (20)
    assert client_config("admin", "given:1", p)["security.protocol"] == "SSL"


def test_defaults_fill_only_what_the_yaml_leaves_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STYLUS_PROFILE", "compose")
    filled = pipeline()
    stateful, stateless = filled.processors["stateful"], filled.processors["stateless"]
    assert stateful.state.dir == "/var/lib/stylus/state"
    assert stateful.state.backup is not None and stateful.state.backup.uri == "hdfs://namenode:9870/stylus"
    assert stateful.state.backup.interval == 300.0
    assert stateless.state.backup is None  # no backups for stateless processors
    kept = pipeline(state="    state: {dir: ./mine, backup: {uri: 'file:///b'}}")
    assert kept.processors["stateful"].state.dir == "./mine"
    backup = kept.processors["stateful"].state.backup
    assert backup is not None and backup.uri == "file:///b"
    monkeypatch.delenv("STYLUS_PROFILE")
    assert pipeline().processors["stateful"].state.dir == "./.stylus/state"


def test_unknown_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProfileError, match="known profiles: compose, local, production"):
        load_profile("staging")
    monkeypatch.setenv("STYLUS_PROFILE", "staging")
    with pytest.raises(ProfileError):
        bootstrap_from(None)


def test_a_clients_own_defaults_sit_over_ours_and_under_all_that_is_set(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`client_config`'s `defaults`: a transactional or bulk producer's defaults replace ours, and give way
    to the profile, the YAML and the caller's own settings."""
    plain = pipeline()
    assert client_config("producer", "b:1", plain)["linger.ms"] == 5  # ours
    assert client_config("producer", "b:1", plain, None, {"linger.ms": 9})["linger.ms"] == 9
    assert client_config("producer", "b:1", plain, None, {"linger.ms": 9}, **{"linger.ms": 2})["linger.ms"] == 2
    in_yaml = pipeline(kafka="kafka: {producer: {linger.ms: 7}}")
    assert client_config("producer", "b:1", in_yaml, None, {"linger.ms": 9})["linger.ms"] == 7
    (tmp_path / "slow.yaml").write_text("profile: slow\nkafka:\n  linger.ms: 3\n")
    monkeypatch.setenv("STYLUS_PROFILES_DIR", str(tmp_path))
    monkeypatch.setenv("STYLUS_PROFILE", "slow")
    assert client_config("producer", "b:1", plain, None, {"linger.ms": 9})["linger.ms"] == 3
