"""Faults (docs/faults.md), each asserting that no input record is lost: the broker stalled and
resumed (SIGSTOP/SIGCONT), the state disk full, backpressure from a stalled broker."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import load_pipeline
from stylus.config.model import Pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.runtime.runner import PipelineRunner
from stylus.state.kv import RocksKV
from stylus.state.store import PartitionStore
from tests.support.kafka import produce, read_raw


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A broker of this test's own: pausing the session broker would stall every other test."""
    with EmbeddedBroker() as broker:
        yield broker


def _pipeline(tmp_path: Path, bootstrap: str, processor: dict[str, Any], name: str = "fault") -> Pipeline:
    doc = {
        "pipeline": f"{name}-{uuid.uuid4().hex[:6]}",
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
        "processors": {"p": {"inputs": ["in"], "outputs": ["out"], "checkpoint": {"interval": "500ms"},
                             **processor}},
    }
    doc["processors"]["p"].setdefault("state", {"dir": str(tmp_path / "state")})
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pipeline = load_pipeline(path)
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    return pipeline


def _ids(bootstrap: str, topic: str) -> list[int]:
    return [json.loads(m.value())["id"] for m in read_raw(bootstrap, topic)]


class Background:
    """A PipelineRunner on a thread, stopped like SIGTERM would stop it."""

    def __init__(self, pipeline: Pipeline, bootstrap: str, exit_when_idle: float | None = None) -> None:
        self.runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=exit_when_idle)
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.runner.run(install_signals=False)

    def stop(self, timeout: float = 60) -> int | None:
        self.runner.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the runner did not stop"
        return self.code


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_broker_paused_and_resumed_loses_nothing(own_broker: EmbeddedBroker, tmp_path: Path) -> None:
    bootstrap = own_broker.bootstrap
    pipeline = _pipeline(tmp_path, bootstrap, {"class": "tests.apps.faulty:BigState", "config": {"size": 10},
                                               "semantics": {"state": "exactly_once", "output": "at_least_once"}})
    produce(bootstrap, "in", [(f"k{i % 5}", {"id": i}) for i in range(300)])
    bg = Background(pipeline, bootstrap)
    _wait_for(lambda: len(set(_ids(bootstrap, "out"))) >= 300, 60, "the first records")

    own_broker.pause()  # longer than session.timeout.ms: the group will have to settle again
    paused_at = time.monotonic()
    producer_thread = threading.Thread(  # records sent while the broker is stalled wait in the client
        target=produce, args=(bootstrap, "in", [(f"k{i % 5}", {"id": i}) for i in range(300, 600)]))
    producer_thread.start()
    time.sleep(8)
    own_broker.resume()
    producer_thread.join(60)
    assert time.monotonic() - paused_at >= 8

    _wait_for(lambda: len(set(_ids(bootstrap, "out"))) >= 600, 90, "every record after the pause")
    assert bg.stop() == 0, bg.runner.errors
    out = _ids(bootstrap, "out")
    assert set(out) == set(range(600))  # nothing lost (at-least-once output may repeat some)
    stored: dict[int, int] = {}
    for partition in (0, 1):
        store = PartitionStore(RocksKV(tmp_path / "state" / pipeline.pipeline / "p" / f"in-{partition}"))
        try:
            stored[partition] = store.stored_offset() or 0
            keys = {int(k) for k, _ in store.state.items()}
        finally:
            store.close()
        assert keys <= set(range(600))
    assert sum(stored.values()) == 600  # exactly-once state: every input offset saved once


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_state_disk_full_fails_loudly_then_resumes_without_loss(bootstrap: str, small_disk: Path,
                                                                tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, bootstrap, {
        "class": "tests.apps.faulty:BigState", "config": {"size": 20_000},
        "semantics": {"state": "exactly_once", "output": "at_least_once"},
        "state": {"dir": str(small_disk / "state")},
    }, name="diskfull")
    topic_in, topic_out = pipeline.processors["p"].inputs[0], pipeline.processors["p"].outputs[0]
    produce(bootstrap, topic_in, [(f"k{i}", {"id": i}) for i in range(200)])  # ~4 MB of state for 1 MB disk

    first = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.0)
    assert first.run(install_signals=False) == 1
    error = first.errors["p"]
    assert "No space left" in error or "IO error" in error, error

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # space freed
    second = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.0)
    assert second.run(install_signals=False) == 0, second.errors

    assert set(_ids(bootstrap, topic_out)) == set(range(200))
    keys: set[int] = set()
    for partition in (0, 1):
        store = PartitionStore(RocksKV(small_disk / "state" / pipeline.pipeline / "p" / f"{topic_in}-{partition}"))
        try:
            keys |= {int(k) for k, _ in store.state.items()}
        finally:
            store.close()
    assert keys == set(range(200))
