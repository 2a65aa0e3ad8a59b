"""TestDriver basics: the SPEC example, partitioning as the runtime's producers do, dead letters, state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stylus.core.engine import StopProcessing
from stylus.testing import Record, TestDriver
from tests.runtime.test_partitioning import java_partition
from tests.testing.pipelines import word_count, write

Factory = Callable[..., TestDriver]


def test_the_spec_and_readme_example(tmp_path: Path) -> None:
    path = write(tmp_path, word_count())
    with TestDriver(str(path)) as driver:
        driver.send("words", {"word": "a"}, key="a", timestamp=1_000)
        driver.advance_watermark(60_000)
        out = driver.outputs("counts")
        assert [(r.key, r.value, r.timestamp, r.topic) for r in out] == [("a", {"word": "a", "count": 1}, 1_000,
                                                                          "counts")]
        assert driver.state("wc", partition=0) == {"a": 1}
        driver.checkpoint()  # and the README's lines after it
        driver.send("words", {"word": "a"}, key="a")
        driver.crash()
        assert [r.value["count"] for r in driver.outputs("counts")] == [1, 2, 2]  # at-least-once output
        assert driver.state("wc", partition=0) == {"a": 2}


def test_records_are_partitioned_by_murmur2_of_their_key(tmp_path: Path, stylus_driver: Factory) -> None:
    driver = stylus_driver(write(tmp_path, word_count(partitions=4)), processors=["wc"])
    keys = [f"user-{i}" for i in range(50)] + ["", "é"]
    sent = [driver.send("words", {"n": i}, key=k) for i, k in enumerate(keys)]
    assert all(r.partition == java_partition(r.key.encode(), 4) for r in sent if r.key is not None)
    counts = driver.outputs("counts")
    assert [r.partition for r in counts] == [java_partition(k.encode(), 3) for k in keys]
    for partition in range(4):  # state is per input partition
        assert set(driver.state("wc", partition)) == {r.key for r in sent if r.partition == partition}
    keyless = [driver.send("words", "x").partition for _ in range(8)]
    assert keyless == [0, 1, 2, 3, 0, 1, 2, 3]  # round-robin, where librdkafka picks at random


def test_a_failing_record_goes_to_the_dead_letter_topic(tmp_path: Path, stylus_driver: Factory) -> None:
    path = write(tmp_path, {
        "pipeline": "bad",
        "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
        "processors": {"f": {"class": "tests.apps.counting:Failing", "inputs": ["in"], "outputs": ["out"],
                             "semantics": {"output": "at_least_once"}}},
    })
    driver = stylus_driver(path)
    driver.send("in", {"id": 1}, key="k")
    driver.send("in", {"id": 2, "fail": True}, key="k", headers={"trace": "t-2"})
    driver.send("in", b"{not json", key="k")  # bytes go as they are: this one fails to decode
    driver.send("in", {"id": 3}, key="k")
    assert [r.value for r in driver.outputs("out")] == [{"id": 1}, {"id": 3}]
    letters = driver.outputs("bad.f.dlq")
    assert [r.value for r in letters] == [{"id": 2, "fail": True}, b"{not json"]  # by the source's serde
    first = letters[0]
    assert first.key == "k" and first.headers["trace"] == b"t-2"
    assert first.headers["stylus.error"] == b"ValueError: bad record 2"
    assert first.headers["stylus.error.stage"] == b"process"
    assert (first.headers["stylus.source.topic"], first.headers["stylus.source.offset"]) == (b"in", b"1")
    assert first.headers["stylus.error.time"] == b"0"  # the driver's clock: same input, same letters
    assert letters[1].headers["stylus.error.stage"] == b"decode"


@pytest.mark.parametrize("semantics", [{"state": "at_least_once", "output": "at_least_once"},
                                       {"state": "exactly_once", "output": "at_most_once"},
                                       {"state": "exactly_once", "output": "exactly_once"}],
                         ids=["alo-alo", "eo-amo", "eo-eo"])
@pytest.mark.parametrize("cls", ["EmitTwice", "EmitTwiceBatch"])
def test_an_unencodable_emit_dead_letters_its_record_with_none_of_its_outputs(
        tmp_path: Path, stylus_driver: Factory, cls: str, semantics: dict[str, str]) -> None:
    path = write(tmp_path, {
        "pipeline": "enc",
        "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
        "processors": {"p": {"class": f"tests.apps.faulty:{cls}", "inputs": ["in"], "outputs": ["out"],
                             "semantics": semantics}},
    })
    driver = stylus_driver(path)
    driver.send_many("in", [{"n": 0, "bad": False}, {"n": 1, "bad": True}, {"n": 2, "bad": False}])
    driver.checkpoint()
    assert [r.value for r in driver.outputs("out", committed=True)] == [
        {"n": 0, "first": True}, {"n": 0}, {"n": 2, "first": True}, {"n": 2}]
    letters = driver.outputs("enc.p.dlq")
    assert [r.value for r in letters] == [{"n": 1, "bad": True}]
    assert letters[0].headers["stylus.error"].startswith(b"TypeError")


def test_unknown_names_are_refused_with_what_exists(tmp_path: Path, stylus_driver: Factory) -> None:
    path = write(tmp_path, word_count())
    with pytest.raises(ValueError, match=r"unknown processor\(s\) \['nope'\]; the pipeline has \['wc'\]"):
        TestDriver(path, processors=["nope"])
    driver = stylus_driver(path)
    with pytest.raises(KeyError, match="declared"):
        driver.send("nowhere", {})
    with pytest.raises(ValueError, match="no checkpoint step `transaction`"):
        driver.crash(after="transaction")


def test_outputs_are_records_that_compare_by_value(tmp_path: Path, stylus_driver: Factory) -> None:
    driver = stylus_driver(write(tmp_path, word_count()))
    driver.advance_clock(5_000)
    driver.send("words", "b", key="b")  # no timestamp: the driver's clock
    assert driver.outputs("counts") == [Record("b", {"word": "b", "count": 1}, 5_000, "counts",
                                               java_partition(b"b", 3), 0, {})]


def test_on_error_stop_raises_out_of_send(tmp_path: Path, stylus_driver: Factory) -> None:
    doc = {"pipeline": "st", "topics": {"in": {}, "out": {}},
           "processors": {"f": {"class": "tests.apps.counting:Failing", "inputs": ["in"], "outputs": ["out"],
                                "semantics": {"output": "at_least_once"}, "on_error": "stop"}}}
    driver = stylus_driver(write(tmp_path, doc))
    with pytest.raises(StopProcessing, match="bad record 7"):
        driver.send("in", {"id": 7, "fail": True})
    assert driver.outputs("out") == []  # and no dead-letter topic: `stop` has none


def test_config_overrides_lay_over_the_yaml(tmp_path: Path, stylus_driver: Factory) -> None:
    doc = {"pipeline": "cfg", "topics": {"in": {}, "out": {}},
           "processors": {"f": {"class": "processors.trending:Filterer", "inputs": ["in"], "outputs": ["out"],
                                "config": {"types": ["post"]}, "semantics": {"output": "at_least_once"}}}}
    driver = stylus_driver(write(tmp_path, doc), config={"f": {"types": ["like"]}})
    driver.send("in", {"type": "post", "dim_id": 1, "ts": 0})
    driver.send("in", {"type": "like", "dim_id": 2, "ts": 0})
    assert [r.value["type"] for r in driver.outputs("out")] == ["like"]
