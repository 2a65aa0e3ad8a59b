"""Metric values on known backlogs, scraped over HTTP from a running worker on the real broker."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from stylus.kafka.admin import create_topics, pipeline_topics
from tests.monitoring.conftest import Samples, running, scrape, values, wait_for
from tests.support.kafka import produce

N_PER_PARTITION = {0: 300, 1: 200}
AGE_MS = 120_000  # the backlog was "produced" two minutes ago (CreateTime set by the producer)


def gated_pipeline(pipeline_factory, gate: Path):
    return pipeline_factory({
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 1}},
        "processors": {
            "gated": {
                "class": "tests.apps.gated:Gated", "inputs": ["in"], "outputs": ["out"],
                "config": {"gate": str(gate)},
                "semantics": {"state": "at_least_once", "output": "at_least_once"},
                "checkpoint": {"interval": "500ms"},
            },
        },
    }, name="metrics")


def produce_backlog(bootstrap: str, topic: str) -> dict[int, int]:
    """Produce N records to each partition explicitly, timestamped AGE_MS ago; return first timestamps."""
    from confluent_kafka import Producer

    base = int(time.time() * 1000) - AGE_MS
    first: dict[int, int] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in N_PER_PARTITION.items():
        first[partition] = base + partition * 1000
        for i in range(n):
            producer.produce(topic, json.dumps({"i": i}).encode(), f"k{i}".encode(), partition=partition,
                             timestamp=first[partition] + i)
    assert producer.flush(30) == 0
    return first


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_lag_metrics_on_a_held_backlog_then_drained(bootstrap, pipeline_factory, gate):
    _, pipeline = gated_pipeline(pipeline_factory, gate)
    topic = next(iter(pipeline.topics))
    create_topics(bootstrap, pipeline_topics(pipeline))
    first_ts = produce_backlog(bootstrap, topic)
    total = sum(N_PER_PARTITION.values())
    name = pipeline.pipeline
    with running(pipeline, bootstrap, gate) as run:
        def held() -> dict | None:
            lags = values(scrape(run.port), "stylus_consumer_lag_messages", pipeline=name, processor="gated")
            return lags if len(lags) == 2 and sum(lags.values()) == total else None

        wait_for(held, 30, what="the whole backlog reported as lag")
        before = time.time()
        samples = scrape(run.port)
        after = time.time()
        for partition, n in N_PER_PARTITION.items():
            labels = {"pipeline": name, "processor": "gated", "topic": topic, "partition": str(partition)}
            [lag] = values(samples, "stylus_consumer_lag_messages", **labels).values()
            assert lag == n
            [end] = values(samples, "stylus_consumer_end_offset", **labels).values()
            assert end == n
            [secs] = values(samples, "stylus_consumer_lag_seconds", **labels).values()
            # the age of the first unprocessed record: its produced timestamp, not a rate estimate
            assert before - first_ts[partition] / 1000 - 0.01 <= secs <= after - first_ts[partition] / 1000 + 0.01
        assert values(samples, "stylus_records_processed_total", processor="gated") == {
            frozenset({("pipeline", name), ("processor", "gated")}): 0.0}
        assert http_status(run.port, "/healthz") == 200
        assert http_status(run.port, "/readyz") == 200  # assigned and running, though lagging

        gate.unlink()  # open the gate: the backlog drains

        def drained() -> dict | None:
            s = scrape(run.port)
            lags = values(s, "stylus_consumer_lag_messages", processor="gated")
            secs = values(s, "stylus_consumer_lag_seconds", processor="gated")
            ok = len(lags) == 2 and not any(lags.values()) and len(secs) == 2 and not any(secs.values())
            return s if ok else None

        samples = wait_for(drained, 30, what="lag back to zero")
        assert sum(values(samples, "stylus_records_processed_total", processor="gated").values()) == total
        assert sum(values(samples, "stylus_records_emitted_total", processor="gated").values()) == total
        assert sum(values(samples, "stylus_processing_latency_seconds_count", processor="gated").values()) >= 1
        # the first batch was held at the gate for at least a moment: the histogram saw it
        assert sum(values(samples, "stylus_processing_latency_seconds_sum", processor="gated").values()) > 0
        assert values(samples, "stylus_assigned_partitions", processor="gated") == {
            frozenset({("pipeline", name), ("processor", "gated")}): 2.0}

        def checkpointed() -> bool:
            s = scrape(run.port)
            committed = values(s, "stylus_consumer_committed_offset", processor="gated")
            return sorted(committed.values()) == sorted(float(n) for n in N_PER_PARTITION.values())

        wait_for(checkpointed, 10, what="committed offsets at the end")
        samples = scrape(run.port)
        assert sum(values(samples, "stylus_checkpoint_duration_seconds_count", processor="gated").values()) >= 1
        [last] = values(samples, "stylus_last_checkpoint_timestamp_seconds", processor="gated").values()
        assert time.time() - 10 < last <= time.time()
        assert values(samples, "stylus_processor_running", processor="gated") == {
            frozenset({("pipeline", name), ("processor", "gated")}): 1.0}
    # after the runner stopped, a failed processor makes /healthz fail; covered by unit of health()


def test_health_and_readiness_follow_the_runner(bootstrap, pipeline_factory, gate):
    from stylus.monitoring.server import health, readiness
    from stylus.runtime.runner import PipelineRunner

    _, pipeline = gated_pipeline(pipeline_factory, gate)
    runner = PipelineRunner(pipeline, bootstrap)
    assert readiness(runner)[0] is False  # no worker yet
    assert health(runner)[0] is True
    runner.errors["gated"] = "boom"
    ok, detail = health(runner)
    assert ok is False and detail["failed"] == {"gated": "boom"}


def test_dead_letters_are_counted(bootstrap, pipeline_factory):
    _, pipeline = pipeline_factory({
        "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
        "processors": {"failing": {"class": "tests.apps.counting:Failing", "inputs": ["in"], "outputs": ["out"],
                                   "semantics": {"output": "at_least_once"}}},
    }, name="dlq")
    topic = next(iter(pipeline.topics))
    produce(bootstrap, topic, [("a", {"id": 1}), ("b", {"id": 2, "fail": True}), ("c", {"id": 3, "fail": True})])
    with running(pipeline, bootstrap) as run:
        def counted() -> bool:
            s = scrape(run.port)
            return (sum(values(s, "stylus_dead_letters_total", processor="failing").values()) == 2
                    and sum(values(s, "stylus_records_processed_total", processor="failing").values()) == 3)

        wait_for(counted, 30, what="two dead letters")


def test_backup_age_and_watermark_lag(bootstrap, pipeline_factory, tmp_path):
    _, pipeline = pipeline_factory({
        "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
        "processors": {"count": {
            "class": "tests.apps.counting:WordCount", "inputs": ["in"], "outputs": ["out"],
            "checkpoint": {"interval": "300ms"}, "event_time": {"allowed_lateness": "0s", "idle_timeout": "1h"},
            "state": {"backup": {"uri": f"file://{tmp_path}/backups", "interval": "1s"}}}},
    }, name="bk")
    topic = next(iter(pipeline.topics))
    create_topics(bootstrap, pipeline_topics(pipeline))
    newest_ms = int(time.time() * 1000) - 30_000
    produce(bootstrap, topic, [(f"w{i}", {"i": i}) for i in range(20)], timestamps=range(newest_ms - 19, newest_ms + 1))
    with running(pipeline, bootstrap) as run:
        def backed_up() -> Samples | None:
            s = scrape(run.port)
            return s if sum(values(s, "stylus_backups_total", processor="count").values()) >= 1 else None

        samples = wait_for(backed_up, 30, what="a backup")
        [age] = values(samples, "stylus_backup_age_seconds", processor="count").values()
        assert 0 <= age < 5
        [wm_lag] = values(samples, "stylus_watermark_lag_seconds", processor="count").values()
        # the watermark is the newest event time (no lateness): 30 s behind the wall clock
        assert 30 <= wm_lag < 40
