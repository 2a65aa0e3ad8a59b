"""The first contact with the configured cluster: a clear error in seconds, not a client log flood."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stylus.config import parse_pipeline
from stylus.kafka.reach import BrokerUnreachable, probe
from stylus.kafka.settings import bootstrap_origin
from tests.support.net import closed_port

PIPELINE = """
pipeline: reach
kafka: {bootstrap.servers: "127.0.0.1:1"}
topics: {a: {partitions: 1}}
processors:
  p: {class: "tests.apps.counting:WordCount", inputs: [a]}
"""


def test_an_unreachable_broker_is_reported_in_seconds_with_its_address() -> None:
    address = f"127.0.0.1:{closed_port()}"
    began = time.monotonic()
    with pytest.raises(BrokerUnreachable) as err:
        probe(address, None, "the test")
    assert time.monotonic() - began < 5
    text = str(err.value)
    assert text.startswith(f"cannot reach Kafka at {address} (bootstrap.servers from the test): ")
    assert "Connection refused" in text and "\n" not in text


def test_a_reachable_broker_answers_with_its_metadata(bootstrap: str) -> None:
    assert probe(bootstrap, None, "the test").brokers


def test_the_origin_names_the_environment_the_yaml_or_the_profile(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    for name in ("STYLUS_BOOTSTRAP_SERVERS", "STYLUS_PROFILE", "STYLUS_PROFILES_DIR"):
        monkeypatch.delenv(name, raising=False)
    pipeline = parse_pipeline(PIPELINE, file="reach.yaml")
    assert bootstrap_origin(pipeline) == "`kafka.bootstrap.servers` in reach.yaml"
    profile = tmp_path / "far.yaml"
    profile.write_text("profile: far\nkafka: {bootstrap.servers: 'far:9092'}\n")
    monkeypatch.setenv("STYLUS_PROFILE", str(profile))
    assert bootstrap_origin(None) == f"the profile {profile} (selected by STYLUS_PROFILE={profile})"
    monkeypatch.setenv("STYLUS_BOOTSTRAP_SERVERS", "127.0.0.1:2")
    assert bootstrap_origin(pipeline) == "the environment variable STYLUS_BOOTSTRAP_SERVERS"
