"""Whether exactly-once record outputs carry `stylus.id`: the cluster probe and `semantics.output_ids`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stylus.config import parse_pipeline
from stylus.config.model import Pipeline
from stylus.kafka import txnprobe
from stylus.kafka.admin import admin_client
from stylus.runtime.transactions import ID_HEADER, record_ids_needed
from stylus.runtime.worker import Worker
from tests.support.kafka import produce, read_raw


def _pipeline(bootstrap: str, name: str, topic_in: str, topic_out: str, cls: str = "tests.apps.counting:WordCount",
              output_ids: str | None = None, backup: str | None = None, tmp: Path | None = None) -> Pipeline:
    semantics = {"state": "exactly_once", "output": "exactly_once"} | ({"output_ids": output_ids} if output_ids else {})
    state = {"dir": str(tmp / "state")} if tmp else {}
    if backup:
        state["backup"] = {"uri": backup}
    return parse_pipeline(json.dumps({
        "pipeline": name, "kafka": {"bootstrap.servers": bootstrap},
        "topics": {topic_in: {"partitions": 2}, topic_out: {"partitions": 2}},
        "processors": {"p": {"class": cls, "inputs": [topic_in], "outputs": [topic_out], "semantics": semantics,
                             "event_time": {"field": "ts", "idle_timeout": "200ms"}, "state": state}},
    }))


def _topics(bootstrap: str) -> set[str]:
    return set(admin_client(bootstrap).list_topics(timeout=10).topics)


@pytest.fixture(autouse=True)
def _no_cached_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(txnprobe, "_answers", {})


def test_the_embedded_broker_shows_aborted_records_and_is_asked_once(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    pipeline = _pipeline(bootstrap, "probe-once", topic_factory("pi"), topic_factory("po"))
    probe = txnprobe.probe_topic(pipeline)
    assert txnprobe.hides_aborted_records(bootstrap, pipeline, "p") is False
    assert probe in _topics(bootstrap)
    records = len(read_raw(bootstrap, probe))
    assert records == 1  # the aborted probe record, visible here (on Kafka it would not be)
    assert txnprobe.hides_aborted_records(bootstrap, pipeline, "p") is False
    assert len(read_raw(bootstrap, probe)) == records  # cached: no second probe


def test_the_probe_read_ends_past_the_record_without_finding_it(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """What a cluster that hides the aborted record looks like to the reader: its end lies past the
    record's offset and the token never came. A token that is there is found."""
    topic = topic_factory("probe-read")
    produce(bootstrap, topic, [(None, {"n": 0}), (None, {"n": 1})])
    pipeline = _pipeline(bootstrap, "probe-read", topic_factory("pi"), topic_factory("po"))
    second = read_raw(bootstrap, topic)[1].value()
    assert txnprobe._visible(bootstrap, pipeline, "p", topic, b"absent", 0, 10) is False
    assert txnprobe._visible(bootstrap, pipeline, "p", topic, second, 0, 10) is True


@pytest.mark.parametrize(("output_ids", "timers", "backup", "expected"), [
    ("always", False, False, True),
    ("never", False, False, False),
    ("never", True, True, False),  # chosen explicitly: the user knows the cluster
    ("auto", True, True, True),  # a restore places fired timers by the ids: no need to ask the cluster
])
def test_output_ids_setting_decides_without_asking_the_cluster(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, caplog: pytest.LogCaptureFixture,
        output_ids: str, timers: bool, backup: bool, expected: bool) -> None:
    name = f"ids-{output_ids}-{timers}"
    pipeline = _pipeline(bootstrap, name, topic_factory("pi"), topic_factory("po"), output_ids=output_ids,
                         backup=f"file://{tmp_path}/backup" if backup else None)
    assert record_ids_needed(pipeline, "p", bootstrap, timers=timers) is expected
    assert txnprobe.probe_topic(pipeline) not in _topics(bootstrap)
    # `never` where a restore needs the ids is allowed (the user knows the cluster) but said out loud
    assert ("cannot tell where the old owner fired its timers" in caplog.text) is (output_ids == "never" and timers)


def test_auto_asks_the_cluster(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    pipeline = _pipeline(bootstrap, "ids-auto", topic_factory("pi"), topic_factory("po"))
    assert record_ids_needed(pipeline, "p", bootstrap, timers=False) is True  # the embedded broker shows them
    assert txnprobe.probe_topic(pipeline) in _topics(bootstrap)


@pytest.mark.parametrize("output_ids", ["auto", "never"])
def test_record_outputs_carry_ids_only_where_needed_and_timer_outputs_always(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path, output_ids: str) -> None:
    topic_in, topic_out = topic_factory("ids-in", 2), topic_factory("ids-out", 2)
    pipeline = _pipeline(bootstrap, f"ids-run-{output_ids}", topic_in, topic_out, cls="tests.apps.timed:EchoAlarm",
                         output_ids=output_ids, tmp=tmp_path)
    produce(bootstrap, topic_in, [(f"k{i}", {"id": i, "ts": 1_000 * i}) for i in range(20)])
    worker = Worker(pipeline, "p", bootstrap, exit_when_idle=1.0)
    worker.run()
    assert worker.record_ids is (output_ids == "auto")  # auto: the embedded broker shows aborted records
    outputs = read_raw(bootstrap, topic_out)
    echoes = [m for m in outputs if b'"echo"' in m.value()]
    alarms = [m for m in outputs if b'"echo"' not in m.value()]
    assert len(echoes) == 20 and len(alarms) >= 19  # the watermark passes every timer but perhaps the last
    assert all(ID_HEADER in dict(m.headers() or []) for m in alarms)  # timer outputs: always
    stamped = [m for m in echoes if ID_HEADER in dict(m.headers() or [])]
    assert len(stamped) == (20 if output_ids == "auto" else 0)
