"""bench/throughput.py's input: the records the throughput and batch benches share, and their spread of keys."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import orjson

from bench.throughput import TYPES, load_input
from stylus.kafka.reader import read_topic


def test_the_input_spreads_its_records_over_as_many_keys_as_asked(bootstrap: str,
                                                                   topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=4)
    load_input(bootstrap, topic, 600, keys=3)
    msgs = read_topic(bootstrap, topic, timeout=60)
    assert len(msgs) == 600
    keys = Counter(m.key() for m in msgs)
    assert set(keys) == {b"k0", b"k1", b"k2"} and min(keys.values()) > 100  # every key, none rare
    values = [orjson.loads(m.value()) for m in msgs]
    assert sorted(v["id"] for v in values) == list(range(600))
    assert {v["type"] for v in values} == set(TYPES) and all(0 <= v["v"] < 1 for v in values)
