"""Small pipelines for the driver's tests, written as YAML files the way a user writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write(tmp_path: Path, doc: dict[str, Any], name: str = "pipeline.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def word_count(semantics: dict[str, str] | None = None, partitions: int = 1) -> dict[str, Any]:
    return {
        "pipeline": "wc-test",
        "topics": {"words": {"partitions": partitions}, "counts": {"partitions": 3}},
        "processors": {"wc": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                              "semantics": semantics or {"state": "at_least_once", "output": "at_least_once"}}},
    }


def windowed(semantics: dict[str, str], late: str = "topic") -> dict[str, Any]:
    """Sums of `amount` per `user` over 10 s tumbling windows of the `ts` field."""
    return {
        "pipeline": "win",
        "topics": {"payments": {"partitions": 2}, "sums": {"partitions": 2}},
        "processors": {"sum": {
            "class": "stylus.windows:WindowedProcessor", "inputs": ["payments"], "outputs": ["sums"],
            "config": {"window": {"type": "tumbling", "size": "10s"},
                       "aggregate": {"type": "sum", "field": "amount"}, "key": "user"},
            "semantics": semantics,
            "event_time": {"field": "ts", "late": late},
        }},
    }
