"""SASL/SSL settings reach every client, including the group-less helpers that read topics, probe
offsets and list or delete topics: a pipeline that asks for SSL with a CA file that does not exist
must fail on that file everywhere, never fall back to plaintext."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException

from stylus.backfill.outputs import OutputTarget
from stylus.backfill.read import KafkaRange
from stylus.backfill.search import TimestampProbe
from stylus.backfill.task import JobSpec
from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.kafka.admin import delete_topics
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.kafka.reader import read_topic
from stylus.kafka.settings import connect, remember_connection
from stylus.monitoring.lag import pipeline_lag
from stylus.runtime.deadletters import read_dead_letters
from tests.support.cli import run_stylus

BAD_CA = "/nonexistent/stylus-ca.pem"


def ssl_pipeline(extra: str = "") -> Pipeline:
    return parse_pipeline(f"""
pipeline: tls
kafka: {{security.protocol: SSL, ssl.ca.location: {BAD_CA}, sasl.password: pw-never-shown-1{extra}}}
topics: {{a: {{}}, b: {{}}}}
processors: {{x: {{class: "tests.apps.counting:Passthrough", inputs: [a], outputs: [b]}}}}
""")


HELPERS: dict[str, Callable[[str, Pipeline], Any]] = {
    "read_topic": lambda b, p: read_topic(b, "a"),
    "end_offsets": lambda b, p: end_offsets(b, [("a", 0)], timeout=2),
    "topic_partitions": lambda b, p: topic_partitions(b, ["a"], timeout=2),
    "delete_topics": lambda b, p: delete_topics(b, ["a"], timeout=2),
    "read_dead_letters": lambda b, p: read_dead_letters(b, p, "x", timeout=2),
    "pipeline_lag": lambda b, p: pipeline_lag(p, b, timeout=2),
    "backfill_range": lambda b, p: KafkaRange(b, "a", 0, 0, 1),
    "backfill_timestamp_probe": lambda b, p: TimestampProbe(b),
}


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_every_helper_client_uses_the_pipelines_tls_settings(bootstrap: str, helper: str) -> None:
    address = bootstrap.replace("127.0.0.1", "localhost")  # the same broker under a name of this test's own
    pipeline = ssl_pipeline()
    remember_connection(address, pipeline)
    with pytest.raises(KafkaException, match=r"ssl\.ca\.location"):
        HELPERS[helper](address, pipeline)


def test_a_spark_task_connects_with_the_pipelines_settings(bootstrap: str) -> None:
    """Backfill tasks run in other processes: the pipeline they load brings its settings along."""
    address = bootstrap.replace("127.0.0.1", "localhost")
    job = JobSpec(pipeline=ssl_pipeline().model_dump(mode="json"), processor="x", bootstrap=address,
                  archive_root=None, output=OutputTarget(kind="collect"))
    assert connect(address) == {"bootstrap.servers": address}
    job.load_pipeline()
    with pytest.raises(KafkaException, match=r"ssl\.ca\.location"):
        KafkaRange(address, "a", 0, 0, 1)


def test_connect_reveals_secrets_to_librdkafka_only(bootstrap: str) -> None:
    address = bootstrap.replace("127.0.0.1", "localhost")
    assert connect(address) == {"bootstrap.servers": address}  # nothing remembered: plain address
    remember_connection(address, ssl_pipeline())
    config = connect(address, **{"group.id": "g"})
    assert config["security.protocol"] == "SSL" and config["ssl.ca.location"] == BAD_CA
    assert type(config["sasl.password"]) is str and config["sasl.password"] == "pw-never-shown-1"
    assert config["group.id"] == "g" and config["bootstrap.servers"] == address


def test_cli_tools_fail_on_the_tls_setting_and_never_show_the_secret(bootstrap: str, tmp_path: Any) -> None:
    path = tmp_path / "tls.yaml"
    path.write_text(f"""
pipeline: tls
kafka: {{bootstrap.servers: "{bootstrap}", security.protocol: SSL, ssl.ca.location: {BAD_CA},
        sasl.password: pw-never-shown-2}}
topics: {{a: {{}}, b: {{}}}}
processors: {{x: {{class: "tests.apps.counting:Passthrough", inputs: [a], outputs: [b]}}}}
""")
    for args in (("lag", str(path)), ("dlq", str(path), "--processor", "x")):
        done = run_stylus(*args, timeout=60)
        assert done.returncode != 0, (args, done.stdout)
        assert "ssl.ca.location" in done.stdout + done.stderr, (args, done.stderr[-1500:])
        assert "pw-never-shown-2" not in done.stdout + done.stderr
