"""One Spark task's work (`run_slot`), run in process: its units one after the other, their Kafka output
awaited once at the end of the task (the units share one producer), so that a delivery failure of any unit
still fails the task."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest

from stylus.backfill.bounds import parse_bound
from stylus.backfill.job import plan_for
from stylus.backfill.outputs import OutputTarget
from stylus.backfill.task import JobSpec, run_slot
from stylus.kafka.admin import create_topics
from tests.support.kafka import produce, read_raw

EARLIEST, LATEST = parse_bound(None, default="earliest"), parse_bound(None, default="latest")


def wordcount(producer: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {"count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"],
                                 "outputs": ["counts"]}},
    }
    if producer:
        doc["kafka"] = {"producer": producer}
    return doc


def one_task(bootstrap: str, pipeline: Any) -> tuple[JobSpec, list[str]]:
    """Both partitions' units, planned as `stylus backfill` plans them, for one task writing to the
    processor's own output topic."""
    plan = plan_for(pipeline, "count", bootstrap, EARLIEST, LATEST)
    assert len(plan.units) == 2  # stateful: one unit per input partition
    job = JobSpec(pipeline=pipeline.model_dump(mode="json", by_alias=True), processor="count",
                  bootstrap=bootstrap, archive_root=None, output=OutputTarget(kind="outputs"))
    return job, [u.model_dump_json() for u in plan.units]


def test_a_task_writes_every_output_of_each_of_its_units_once(bootstrap: str, pipeline_factory: Any) -> None:
    _, pipeline = pipeline_factory(wordcount())
    words, counts = list(pipeline.topics)
    create_topics(bootstrap, dict(pipeline.topics))
    sent = [(f"w{i % 37}", {"w": i}) for i in range(4000)]
    produce(bootstrap, words, sent)
    job, units = one_task(bootstrap, pipeline)

    rows = list(run_slot(job, units, [0, 1]))

    done = [orjson.loads(row[4]) for row in rows if row[0] == "done"]
    assert sorted(d["read"] for d in done) != [0, 0] and sum(d["read"] for d in done) == 4000
    assert sum(d["outputs"].get(counts, 0) for d in done) == 4000
    written = read_raw(bootstrap, counts)
    # every key's running counts 1..n exactly once: nothing lost, nothing written twice across units
    per_key = Counter(key for key, _ in sent)
    got: dict[str, list[int]] = {}
    for msg in written:
        got.setdefault(msg.key().decode(), []).append(orjson.loads(msg.value())["count"])
    assert {k: sorted(v) for k, v in got.items()} == {k: list(range(1, n + 1)) for k, n in per_key.items()}


def test_a_delivery_failure_of_an_earlier_unit_still_fails_the_task(bootstrap: str, pipeline_factory: Any) -> None:
    # a 1 ms message timeout: every output expires undelivered (a new idempotent producer sends nothing for
    # its first ~0.5 s), so both units' deliveries fail, and the task must not end as if it had succeeded
    _, pipeline = pipeline_factory(wordcount({"message.timeout.ms": 1, "linger.ms": 0}))
    words, _ = list(pipeline.topics)
    create_topics(bootstrap, dict(pipeline.topics))
    produce(bootstrap, words, [(f"w{i % 5}", {"w": i}) for i in range(200)])
    job, units = one_task(bootstrap, pipeline)

    with pytest.raises(RuntimeError, match="output not delivered"):
        list(run_slot(job, units, [0, 1]))


def test_a_state_key_the_stream_refuses_fails_the_task(bootstrap: str, pipeline_factory: Any) -> None:
    """A task's state is a plain dict (stylus/state/memory.py) that takes any key; the stream's refuses a
    non-str key at the write, so the task must fail on it too, with the same error."""
    doc = wordcount()
    doc["processors"]["count"]["class"] = "tests.apps.counting:IntStateKey"
    _, pipeline = pipeline_factory(doc)
    words, _ = list(pipeline.topics)
    create_topics(bootstrap, dict(pipeline.topics))
    produce(bootstrap, words, [(f"w{i % 5}", {"w": i}) for i in range(50)])
    job, units = one_task(bootstrap, pipeline)

    with pytest.raises(TypeError, match=r"state keys are str, not int \(2\)"):
        list(run_slot(job, units, [0, 1]))


def test_serving_the_output_between_batches_lets_delivered_records_go(bootstrap: str, pipeline_factory: Any) -> None:
    """librdkafka keeps a produced record until its delivery report is served, even one that is reported
    only on error: a task that never served them held its whole output until the end (~150 MB per 500,000
    records), so the task serves its output after every batch (UnitRun.rows)."""
    import time

    from stylus.backfill.outputs import TopicOutput

    _, pipeline = pipeline_factory(wordcount())
    _, counts = list(pipeline.topics)
    create_topics(bootstrap, dict(pipeline.topics))
    output = TopicOutput(pipeline, "count", bootstrap, None)
    for i in range(1000):
        output.produce(counts, b'{"n": %d}' % i, b"k", -1, None, None, 0)
    deadline = time.monotonic() + 10
    while len(read_raw(bootstrap, counts)) < 1000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(output.producer) >= 1000  # delivered (read back above), but still held by the client
    output.serve()
    assert len(output.producer) == 0
    output.wait()
