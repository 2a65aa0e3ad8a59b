"""A Grafana dashboard per pipeline, built with grafanalib (not hand-written JSON).

Layout: an overview row (alerts firing, worst lag per processor), then one row per processor in
topological order: lag per partition (messages, seconds against its alert threshold), throughput in
and out, processing latency, checkpoints. Every query uses metrics that `stylus run --metrics-port`
exports (the tests check this against a live scrape).
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    AlertList,
    Dashboard,
    GridPos,
    RowPanel,
    Stat,
    Target,
    Template,
    Templating,
    TimeSeries,
)

from stylus.config.model import Pipeline
from stylus.monitoring.alerts import checkpoint_stale_after

DATASOURCE = "${datasource}"
WIDTH = 24


class _Grid:
    """Places panels left to right, wrapping at Grafana's 24 columns."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_height = 0

    def place(self, w: int, h: int) -> GridPos:
        if self.x + w > WIDTH:
            self.newline()
        pos = GridPos(h=h, w=w, x=self.x, y=self.y)
        self.x += w
        self.row_height = max(self.row_height, h)
        return pos

    def newline(self) -> None:
        self.y += self.row_height
        self.x = 0
        self.row_height = 0


def _ts(title: str, targets: list[tuple[str, str]], grid: _Grid, unit: str = "short", w: int = 8,
        h: int = 8) -> TimeSeries:
    return TimeSeries(
        title=title, dataSource=DATASOURCE, unit=unit, gridPos=grid.place(w, h),
        targets=[Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i))
                 for i, (expr, legend) in enumerate(targets)],
    )


def processor_panels(pipeline: Pipeline, name: str, grid: _Grid) -> list[Any]:
    spec = pipeline.processors[name]
    sel = f'pipeline="{pipeline.pipeline}",processor="{name}"'
    grid.newline()
    ins = ", ".join(spec.inputs)
    outs = ", ".join(spec.outputs) or "-"
    panels: list[Any] = [RowPanel(title=f"{name}: [{ins}] -> [{outs}]", gridPos=grid.place(WIDTH, 1))]
    panels.append(_ts("lag (messages) per partition",
                      [(f"stylus_consumer_lag_messages{{{sel}}}", "{{topic}}[{{partition}}]")], grid))
    panels.append(_ts("lag (seconds) per partition",
                      [(f"stylus_consumer_lag_seconds{{{sel}}}", "{{topic}}[{{partition}}]"),
                       (f"vector({spec.alerts.lag_seconds:g})", "alert threshold")], grid, unit="s"))
    panels.append(_ts("throughput (records/s)",
                      [(f"sum(rate(stylus_records_processed_total{{{sel}}}[1m]))", "in"),
                       (f"sum(rate(stylus_records_emitted_total{{{sel}}}[1m]))", "out"),
                       (f"sum(rate(stylus_dead_letters_total{{{sel}}}[1m]))", "dead letters")], grid))
    panels.append(_ts("processing latency per batch",
                      [(f"histogram_quantile({q}, sum by (le) "
                        f"(rate(stylus_processing_latency_seconds_bucket{{{sel}}}[5m])))", f"p{int(q * 100)}")
                       for q in (0.5, 0.99)], grid, unit="s"))
    panels.append(_ts("checkpoints",
                      [(f"histogram_quantile(0.99, sum by (le) "
                        f"(rate(stylus_checkpoint_duration_seconds_bucket{{{sel}}}[5m])))", "duration p99"),
                       (f"histogram_quantile(0.99, sum by (le) "
                        f"(rate(stylus_transaction_commit_duration_seconds_bucket{{{sel}}}[5m])))",
                        "transaction commit p99"),
                       (f"max(time() - stylus_last_checkpoint_timestamp_seconds{{{sel}}})", "since last"),
                       (f"vector({checkpoint_stale_after(spec):g})", "stale threshold")], grid, unit="s"))
    panels.append(Stat(title="running instances", dataSource=DATASOURCE, gridPos=grid.place(4, 8),
                       targets=[Target(expr=f"sum(stylus_processor_running{{{sel}}})", refId="A")]))
    panels.append(Stat(title="assigned partitions", dataSource=DATASOURCE, gridPos=grid.place(4, 8),
                       targets=[Target(expr=f"sum(stylus_assigned_partitions{{{sel}}})", refId="A")]))
    return panels


def build_dashboard(pipeline: Pipeline) -> Dashboard:
    grid = _Grid()
    sel = f'pipeline="{pipeline.pipeline}"'
    panels: list[Any] = [
        RowPanel(title="overview", gridPos=grid.place(WIDTH, 1)),
        AlertList(title="alerts", gridPos=grid.place(8, 8), onlyAlertsOnDashboard=False, show="current",
                  nameFilter="Stylus"),
        _ts("worst lag (seconds) by processor",
            [(f"max by (processor) (stylus_consumer_lag_seconds{{{sel}}})", "{{processor}}")], grid, unit="s"),
        _ts("input throughput by processor (records/s)",
            [(f"sum by (processor) (rate(stylus_records_processed_total{{{sel}}}[1m]))", "{{processor}}")], grid),
    ]
    for name in pipeline.topological_order():
        panels.extend(processor_panels(pipeline, name, grid))
    return Dashboard(
        title=f"Stylus: {pipeline.pipeline}",
        uid=f"stylus-{pipeline.pipeline}"[:40],
        tags=["stylus", pipeline.pipeline],
        timezone="utc",
        refresh="10s",
        panels=panels,
        templating=Templating(list=[Template(name="datasource", type="datasource", query="prometheus",
                                             label="Prometheus", default="Prometheus")]),
    ).auto_panel_ids()


def render_dashboard(pipeline: Pipeline) -> str:
    return json.dumps(build_dashboard(pipeline).to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"
