"""The Kafka sink against the real broker: header strings librdkafka cannot take never reach it
(confluent-kafka crashes the whole process on a lone surrogate in a header name)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from stylus.config import parse_pipeline
from stylus.runtime.sink import KafkaSink, clean_headers
from tests.support.kafka import read_raw

BAD = "bad\udcff"  # a lone surrogate: not encodable as UTF-8


def test_clean_headers_refuses_or_repairs() -> None:
    assert clean_headers({"a": b"1", "b": "x"}, repair=False) == [("a", b"1"), ("b", "x")]
    with pytest.raises(ValueError, match="not valid UTF-8"):
        clean_headers([(BAD, b"v")], repair=False)
    assert clean_headers([(BAD, BAD)], repair=True) == [("bad\\udcff", "bad\\udcff")]


def test_emitted_bad_header_fails_the_record_and_dead_letters_are_repaired(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("sink")
    pipeline = parse_pipeline(f"pipeline: s\ntopics: {{src: {{}}, {topic}: {{}}}}\nprocessors:\n"
                              f"  p: {{class: 'a.b:C', inputs: [src], outputs: [{topic}]}}\n")
    producer = Producer({"bootstrap.servers": bootstrap})
    sink = KafkaSink(producer, pipeline, (topic,), hold=False)
    with pytest.raises(ValueError):  # inside `process` this is an ordinary record failure (on_error)
        sink(topic, "k", {"v": 1}, 1000, {BAD: b"x"})
    sink.send(topic, b"raw", b"k", 1000, [(BAD, b"x"), ("ok", None)])  # the dead-letter path
    sink.flush(10)
    [msg] = read_raw(bootstrap, topic)
    assert msg.value() == b"raw" and msg.headers() == [("bad\\udcff", b"x"), ("ok", None)]
