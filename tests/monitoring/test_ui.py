"""The status page in headless Chromium: the DAG, lag numbers that change as a backlog drains, the
likely cause when several processors lag. Saves docs/status-page.png when STYLUS_UPDATE_DOCS is set."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.monitoring.status import likely_cause
from stylus.monitoring.ui import StatusServer
from tests.monitoring.conftest import running, wait_for
from tests.support.tools import needs

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args: str) -> str:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=90,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def produce(bootstrap: str, topic: str, n: int, first_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, json.dumps({"i": i}).encode(), f"k{i}".encode(), timestamp=first_ms + i)
    assert producer.flush(30) == 0


def api(url: str) -> dict:
    with urllib.request.urlopen(url + "api/status", timeout=10) as resp:
        return json.loads(resp.read())


def lag_cells(dom: str, processor: str) -> list[int]:
    table = re.search(rf'<table data-processor="{processor}">(.*?)</table>', dom, re.S)
    assert table, f"no table for {processor}"
    return [int(v) for v in re.findall(r'<td class="lag">(\d+)</td>', table.group(1))]


def two_stage(pipeline_factory, gate: Path):
    gated = {"class": "tests.apps.gated:Gated", "config": {"gate": str(gate)},
             "semantics": {"output": "at_least_once"}, "checkpoint": {"interval": "300ms"},
             "alerts": {"lag_seconds": "1s", "for": "0s"}}
    return pipeline_factory({
        "topics": {"clicks": {"partitions": 2}, "sessions": {"partitions": 1}, "report": {"partitions": 1}},
        "processors": {"sessionizer": {**gated, "inputs": ["clicks"], "outputs": ["sessions"]},
                       "reporter": {**gated, "inputs": ["sessions"], "outputs": ["report"]}},
    }, name="ui")


def test_likely_cause_is_furthest_upstream(pipeline_factory, tmp_path):
    _, pipeline = two_stage(pipeline_factory, tmp_path / "gate")
    assert likely_cause(pipeline, {"sessionizer", "reporter"}) == "sessionizer"
    assert likely_cause(pipeline, {"reporter"}) == "reporter"
    assert likely_cause(pipeline, set()) is None


@needs(CHROMIUM, "chromium (Debian package)")
def test_status_page_in_headless_chromium(bootstrap, pipeline_factory, gate, tmp_path):
    _, pipeline = two_stage(pipeline_factory, gate)
    clicks, sessions = list(pipeline.topics)[:2]
    create_topics(bootstrap, pipeline_topics(pipeline))
    now_ms = int(time.time() * 1000)
    produce(bootstrap, clicks, 240, now_ms - 90_000)
    produce(bootstrap, sessions, 60, now_ms - 30_000)  # the second stage has a backlog of its own

    server = StatusServer(pipeline, bootstrap, port=0, interval=0.5, window=2.0).start()
    try:
        with running(pipeline, bootstrap, gate):
            wait_for(lambda: (s := api(server.url)).get("ready") and s["processors"]["sessionizer"]["lag_messages"]
                     == 240 and s["processors"]["reporter"]["lag_messages"] == 60, 30, what="both backlogs")
            dom = chromium("--dump-dom", server.url)
            assert 'data-node="proc:sessionizer"' in dom and 'data-node="proc:reporter"' in dom
            assert f'data-edge="topic:{clicks}-&gt;proc:sessionizer"' in dom  # DAG edges drawn
            assert f'data-edge="proc:sessionizer-&gt;topic:{sessions}"' in dom
            assert sum(lag_cells(dom, "sessionizer")) == 240 and sum(lag_cells(dom, "reporter")) == 60
            assert re.search(r'id="likely-cause">likely cause: <b>sessionizer</b>', dom)
            assert 'class="firing" data-alert="StylusLagHigh" data-processor="sessionizer"' in dom
            assert re.search(r"lag 240 · 1\.\dm</text>", dom)  # the edge label: 240 records, ~1.5 minutes old
            # the picture in docs/ is refreshed on request only: a test run leaves the checkout clean
            png = (ROOT / "docs" if os.environ.get("STYLUS_UPDATE_DOCS") else tmp_path) / "status-page.png"
            chromium(f"--screenshot={png}", "--window-size=1300,820", "--hide-scrollbars", server.url)
            assert png.stat().st_size > 10_000

            gate.unlink()  # both stages drain

            wait_for(lambda: (s := api(server.url))["processors"]["sessionizer"]["lag_messages"] == 0
                     and s["processors"]["reporter"]["lag_messages"] == 0, 30, what="drained")
            dom = chromium("--dump-dom", server.url)
            assert lag_cells(dom, "sessionizer") == [0, 0] and lag_cells(dom, "reporter") == [0]
            assert 'id="likely-cause"' not in dom
            assert '<ul id="alerts"><li>none</li></ul>' in dom
    finally:
        server.stop()
