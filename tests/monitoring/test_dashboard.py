"""The generated Grafana dashboard as data: rows per processor, valid PromQL, a sane grid."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stylus.config import load_pipeline
from stylus.monitoring.dashboard import render_dashboard
from tests.support.cli import run_stylus
from tests.support.tools import needs

ROOT = Path(__file__).resolve().parents[2]
TRENDING = ROOT / "pipelines" / "trending_events.yaml"


@pytest.fixture
def pipeline():
    return load_pipeline(TRENDING)


def test_rows_follow_the_dag_and_select_their_processor(pipeline):
    board = json.loads(render_dashboard(pipeline))
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows[0] == "overview"
    assert [r.split(":")[0] for r in rows[1:]] == pipeline.topological_order()
    current = None
    for panel in board["panels"]:
        if panel["type"] == "row":
            current = panel["title"].split(":")[0]
            continue
        for target in panel.get("targets", []):
            for sel in re.findall(r'processor="([^"]+)"', target["expr"]):
                assert sel == current, (panel["title"], target["expr"])
    lag_panels = [p for p in board["panels"] if p["title"] == "lag (seconds) per partition"]
    thresholds = [t["expr"] for p in lag_panels for t in p["targets"] if t["legendFormat"] == "alert threshold"]
    assert thresholds == [f"vector({pipeline.processors[n].alerts.lag_seconds:g})"
                          for n in pipeline.topological_order()]


def test_grid_has_no_overlaps(pipeline):
    cells: set[tuple[int, int]] = set()
    for panel in json.loads(render_dashboard(pipeline))["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine


@needs(shutil.which("promtool"), "promtool (Debian prometheus)")
def test_every_query_is_valid_promql(pipeline, tmp_path):
    exprs = [t["expr"] for p in json.loads(render_dashboard(pipeline))["panels"] for t in p.get("targets", [])]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"check:{i}", "expr": e}
                                                        for i, e in enumerate(exprs)]}]}
    (tmp_path / "r.yml").write_text(yaml.safe_dump(rules))
    done = subprocess.run(["promtool", "check", "rules", "r.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def test_cli_writes_the_dashboard(pipeline, tmp_path):
    out = tmp_path / "board.json"
    done = run_stylus("dashboard", str(TRENDING), "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == json.loads(render_dashboard(pipeline))


def test_committed_configs_match_the_trending_pipeline(pipeline):
    """configs/ holds what the generators produce for pipelines/trending_events.yaml; regenerate with
    `stylus alerts pipelines/trending_events.yaml -o configs/prometheus/trending-events.rules.yml` and
    `stylus dashboard pipelines/trending_events.yaml -o configs/grafana/trending-events.json`."""
    from stylus.monitoring.alerts import render_rules

    assert (ROOT / "configs/prometheus/trending-events.rules.yml").read_text() == render_rules(pipeline)
    assert json.loads((ROOT / "configs/grafana/trending-events.json").read_text()) == json.loads(
        render_dashboard(pipeline))
    scrape = yaml.safe_load((ROOT / "configs/prometheus/prometheus.yml").read_text())
    assert scrape["rule_files"] == ["trending-events.rules.yml"]
    assert scrape["scrape_configs"][0]["job_name"] == "stylus-trending-events"
