"""Whole pipelines from their YAML: each stage's output reaches the stages that read its topic, partitioned by
key as the runtime's producers partition it, and watermarks travel between stages as in production."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from processors.generator import GeneratorConfig, generate
from stylus.testing import TestDriver
from tests.runtime.test_partitioning import java_partition
from tests.testing.pipelines import write

Factory = Callable[..., TestDriver]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("split_output", "cat_counts", "replayed"), [
    ("exactly_once", [1, 2], 1),  # the splitter's aborted output is replaced by its replay's: end-to-end exactly once
    ("at_least_once", [1, 2, 3], 2),  # the splitter's replay duplicates its output, and the counter counts it
])
def test_two_stages_rekey_then_count(tmp_path: Path, stylus_driver: Factory, split_output: str,
                                     cat_counts: list[int], replayed: int) -> None:
    path = write(tmp_path, {
        "pipeline": "two",
        "topics": {"lines": {"partitions": 1}, "words": {"partitions": 4}, "counts": {"partitions": 2}},
        "processors": {
            "split": {"class": "tests.apps.counting:Passthrough", "inputs": ["lines"], "outputs": ["words"],
                      "semantics": {"output": split_output}},
            "count": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                      "semantics": {"state": "exactly_once", "output": "exactly_once"}},
        },
    })
    driver = stylus_driver(path)
    words = ["the", "cat", "saw", "the", "dog", "and", "the", "bird"]
    for word in words:
        driver.send("lines", word, key=word)
    assert [r.key for r in driver.outputs("words")] == words
    assert all(r.partition == java_partition(r.key.encode(), 4) for r in driver.outputs("words"))
    final = {r.key: r.value["count"] for r in driver.outputs("counts")}
    assert final == {w: words.count(w) for w in set(words)}
    for partition in range(4):  # the counter's state sits in the partition its keys were routed to
        expected = {w: words.count(w) for w in set(words) if java_partition(w.encode(), 4) == partition}
        assert driver.state("count", partition) == expected
    driver.checkpoint()
    driver.send("lines", "cat", key="cat")
    driver.crash()  # both stages restart from the checkpoint and read the new line again
    assert [r.value["count"] for r in driver.outputs("counts") if r.key == "cat"] == cat_counts
    assert len(driver.outputs("words")) == len(words) + replayed


def test_the_trending_pipeline_end_to_end_with_watermarks_from_the_data(stylus_driver: Factory) -> None:
    driver = stylus_driver(ROOT / "pipelines" / "trending_events.yaml", watermarks="auto")
    events = generate(1_500, GeneratorConfig(rate=100.0))  # 15 s of event time
    for event in events:
        driver.send("events", event, key=event["event_id"], timestamp=event["ts"])
    last = events[-1]["ts"]
    # each stage's watermark follows its upstream's control records
    assert driver.watermark("filterer") <= last
    assert driver.watermark("ranker") <= driver.watermark("scorer") <= driver.watermark("joiner")
    assert driver.watermark("scorer") > events[0]["ts"]
    scored, ranked = driver.outputs("scored"), driver.outputs("ranked")
    assert scored and ranked
    assert all(r.key == r.value["topic"] for r in scored + ranked)
    assert all(r.partition == java_partition(r.key.encode(), 4) for r in scored + ranked)


def test_one_processor_of_a_pipeline_reads_what_the_test_sends(stylus_driver: Factory) -> None:
    driver = stylus_driver(ROOT / "pipelines" / "trending_events.yaml", processors=["ranker"])
    assert list(driver.stages) == ["ranker"]
    start = 1_700_000_010_000
    for i, (event, score) in enumerate([("e1", 3.0), ("e2", 5.0), ("e3", 1.0)]):
        driver.send("scored", {"event_id": event, "topic": "tech", "score": score, "count": 1, "ts": start + i},
                    key="tech", timestamp=start + i)
    driver.advance_watermark(start + 30_000)
    final = [r.value for r in driver.outputs("ranked") if r.value["final"]]
    assert [e["event_id"] for e in final[-1]["top"]] == ["e2", "e1", "e3"]
