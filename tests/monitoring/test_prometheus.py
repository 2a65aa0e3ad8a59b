"""A real Prometheus scrapes a running `stylus run --metrics-port`, evaluates the generated rules, and
has every metric the generated dashboard queries."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import free_port
from stylus.monitoring.alerts import render_rules, scrape_config
from stylus.monitoring.dashboard import render_dashboard
from tests.monitoring.conftest import wait_for
from tests.monitoring.test_metrics import produce_backlog
from tests.support.cli import start_stylus
from tests.support.tools import needs

PROMETHEUS = shutil.which("prometheus")


def query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def scalar_sum(base: str, expr: str) -> float | None:
    result = query(base, expr)
    return sum(float(r["value"][1]) for r in result) if result else None


def prometheus_ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def dashboard_metric_names(pipeline) -> set[str]:
    exprs = [t["expr"] for p in json.loads(render_dashboard(pipeline))["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    names = set()
    for expr in exprs:
        names.update(n for n in re.findall(r"\b(stylus_[a-z_]+)\b", expr))
    return names


@needs(PROMETHEUS, "prometheus (Debian package)")
def test_prometheus_scrapes_a_running_processor(bootstrap, pipeline_factory, gate, tmp_path):
    path, pipeline = pipeline_factory({
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 1}},
        "processors": {"gated": {
            "class": "tests.apps.gated:Gated", "inputs": ["in"], "outputs": ["out"],
            "config": {"gate": str(gate)}, "semantics": {"state": "at_least_once", "output": "at_least_once"},
            "checkpoint": {"interval": "500ms"}, "alerts": {"lag_seconds": "10s", "for": "0s"}}},
    }, name="prom")
    create_topics(bootstrap, pipeline_topics(pipeline))
    produce_backlog(bootstrap, next(iter(pipeline.topics)))  # 300 + 200 records, two minutes old
    metrics_port, prom_port = free_port(), free_port()
    (tmp_path / "rules.yml").write_text(render_rules(pipeline))
    config = yaml.safe_load(scrape_config(pipeline, [f"127.0.0.1:{metrics_port}"], ["rules.yml"], interval="1s"))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    dashboard = json.loads(render_dashboard(pipeline))
    assert dashboard["uid"] == f"stylus-{pipeline.pipeline}"[:40]

    run = start_stylus("run", str(path), "--metrics-port", str(metrics_port), bootstrap=bootstrap,
                       log=tmp_path / "run.log")
    prom = subprocess.Popen(
        [PROMETHEUS, "--config.file=prometheus.yml", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prom.log", "wb"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{prom_port}"
    sel = f'pipeline="{pipeline.pipeline}",processor="gated"'
    try:
        job = f"stylus-{pipeline.pipeline}"
        wait_for(lambda: prometheus_ready(base), 60, what="prometheus ready")
        wait_for(lambda: scalar_sum(base, f'up{{job="{job}"}}') == 1.0, 60, what="target up")
        wait_for(lambda: scalar_sum(base, f"stylus_consumer_lag_messages{{{sel}}}") == 500.0, 60,
                 what="backlog of 500 seen by Prometheus")
        lag_seconds = query(base, f"stylus_consumer_lag_seconds{{{sel}}}")
        assert len(lag_seconds) == 2 and all(115 < float(r["value"][1]) < 200 for r in lag_seconds)
        firing = wait_for(lambda: query(base, f'ALERTS{{alertname="StylusLagHigh",alertstate="firing",{sel}}}'),
                          30, what="StylusLagHigh firing")
        assert firing[0]["metric"]["severity"] == "page"

        gate.unlink()
        wait_for(lambda: scalar_sum(base, f"stylus_consumer_lag_messages{{{sel}}}") == 0.0, 60, what="drained")
        assert scalar_sum(base, f"stylus_records_processed_total{{{sel}}}") == 500.0
        wait_for(lambda: not query(base, f'ALERTS{{alertname="StylusLagHigh",{sel}}}'), 30, what="alert resolved")

        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=10) as resp:
            groups = json.loads(resp.read())["data"]["groups"]
        assert {r["name"] for g in groups for r in g["rules"]} >= {"StylusLagHigh", "StylusProcessorDown"}
        assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups
        with urllib.request.urlopen(f"{base}/api/v1/label/__name__/values", timeout=10) as resp:
            known = set(json.loads(resp.read())["data"])
        missing = dashboard_metric_names(pipeline) - known
        assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"
    finally:
        run.send_signal(signal.SIGTERM)
        prom.terminate()
        try:
            run.wait(30)
        finally:
            prom.wait(30)
            if run.poll() is None:
                run.kill()
    # a clean stop after SIGTERM (final checkpoint), with the metrics server shut down on the way out
    assert run.returncode == 0, Path(tmp_path / "run.log").read_text()[-3000:]
