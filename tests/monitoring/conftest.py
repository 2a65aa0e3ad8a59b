"""Helpers for the monitoring tests: run a pipeline in-process with its metrics endpoint, scrape it."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stylus.config.model import Pipeline
from stylus.monitoring.server import MetricsServer
from stylus.runtime.runner import PipelineRunner

T = TypeVar("T")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def values(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Samples of one metric whose labels include `labels`."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == name and want <= lab}


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, every: float = 0.2, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last: {last!r}")


@dataclass
class Running:
    runner: PipelineRunner
    server: MetricsServer

    @property
    def port(self) -> int:
        return self.server.port


@contextmanager
def running(pipeline: Pipeline, bootstrap: str, gate: Path | None = None) -> Iterator[Running]:
    """The pipeline's processors in a background thread, with /metrics on a free port. A given gate
    is opened before stopping, so a failing test cannot leave a worker blocked at it."""
    runner = PipelineRunner(pipeline, bootstrap)
    server = MetricsServer(runner, 0).start()
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        yield Running(runner, server)
    finally:
        if gate is not None:
            gate.unlink(missing_ok=True)
        runner.stop.set()
        thread.join(30)
        server.stop()
        assert not thread.is_alive(), "runner did not stop"


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """A closed gate for tests.apps.gated:Gated; `gate.unlink()` opens it."""
    path = tmp_path / "gate"
    path.write_text("closed")
    return path
