"""The built-in status page (`stylus ui PIPELINE`): a stdlib HTTP server drawing the DAG as inline SVG
with live lag and throughput on every edge, alerts firing, per-processor detail and the likely cause.

Rendered on the server, refreshed by the browser every few seconds: no JavaScript, no framework,
and a headless browser's DOM dump shows the same numbers a person sees. `/api/status` gives JSON.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stylus.config.model import Pipeline
from stylus.monitoring.status import Status, StatusPoller, depths

log = logging.getLogger(__name__)

COL_W, ROW_H, BOX_W, BOX_H, PAD = 270, 110, 150, 54, 30


def fmt_count(n: float) -> str:
    n = float(n)
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def fmt_secs(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f}h"
    if s >= 60:
        return f"{s / 60:.1f}m"
    return f"{s:.1f}s"


def layout(pipeline: Pipeline) -> dict[str, tuple[int, int]]:
    """Node -> (x, y) of its box's top-left corner."""
    column = depths(pipeline)
    rows: dict[int, int] = {}
    pos: dict[str, tuple[int, int]] = {}
    order = [f"topic:{t}" for t in pipeline.topics] + [f"proc:{p}" for p in pipeline.topological_order()]
    for node in sorted(order, key=lambda n: column[n]):
        c = column[node]
        r = rows.get(c, 0)
        rows[c] = r + 1
        pos[node] = (PAD + c * COL_W, PAD + r * ROW_H)
    return pos


def render_svg(pipeline: Pipeline, st: Status) -> str:
    pos = layout(pipeline)
    width = max(x for x, _ in pos.values()) + BOX_W + PAD
    height = max(y for _, y in pos.values()) + BOX_H + PAD + 20
    firing = {a.processor for a in st.alerts if a.firing}
    pending = {a.processor for a in st.alerts if not a.firing}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="dag" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>']
    for edge in st.edges:
        (x1, y1), (x2, y2) = pos[edge["from"]], pos[edge["to"]]
        ax, ay, bx, by = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
        if edge["kind"] == "input":
            label = f'lag {fmt_count(edge["lag_messages"])} · {fmt_secs(edge["lag_seconds"])}'
            color = "#c0392b" if edge["lag_seconds"] > 0 and edge["to"][5:] in firing | pending else "#555"
        else:
            label = ""
            color = "#555"
        rate = f'{fmt_count(edge["rate"])}/s'
        mx, my = (ax + bx) / 2, (ay + by) / 2
        eid = escape(f'{edge["from"]}->{edge["to"]}')
        parts.append(f'<g class="edge" data-edge="{eid}"><line x1="{ax}" y1="{ay}" x2="{bx}" y2="{by}" '
                     f'stroke="{color}" stroke-width="2" marker-end="url(#arrow)"/>'
                     f'<text class="edge-label" x="{mx}" y="{my - 7}" text-anchor="middle" font-size="11" '
                     f'fill="{color}">{escape(label)}</text>'
                     f'<text class="edge-rate" x="{mx}" y="{my + 15}" text-anchor="middle" font-size="11" '
                     f'fill="#555">{escape(rate)}</text></g>')
    for node, (x, y) in pos.items():
        kind, name = node.split(":", 1)
        if kind == "topic":
            parts.append(f'<g class="topic" data-node="{escape(node)}"><rect x="{x}" y="{y + 8}" width="{BOX_W}" '
                         f'height="{BOX_H - 16}" rx="19" fill="#eef3f8" stroke="#7f9db9"/>'
                         f'<text x="{x + BOX_W / 2}" y="{y + BOX_H / 2 + 4}" text-anchor="middle">'
                         f'{escape(name)} ({pipeline.topics[name].partitions})</text></g>')
            continue
        proc = st.processors.get(name, {})
        fill = "#f5b7b1" if name in firing else "#fdebd0" if name in pending else "#d5f5e3"
        stroke = "#922b21" if name == st.likely_cause else "#333"
        width_px = 4 if name == st.likely_cause else 1.5
        parts.append(f'<g class="processor" data-node="{escape(node)}"><rect x="{x}" y="{y}" width="{BOX_W}" '
                     f'height="{BOX_H}" rx="4" fill="{fill}" stroke="{stroke}" stroke-width="{width_px}"/>'
                     f'<text x="{x + BOX_W / 2}" y="{y + 20}" text-anchor="middle" font-weight="bold">'
                     f'{escape(name)}</text>'
                     f'<text x="{x + BOX_W / 2}" y="{y + 38}" text-anchor="middle">'
                     f'lag {fmt_count(proc.get("lag_messages", 0))} · {fmt_secs(proc.get("lag_seconds", 0.0))}'
                     f'</text></g>')
        if name == st.likely_cause:
            parts.append(f'<text x="{x}" y="{y + BOX_H + 16}" fill="#922b21" font-weight="bold">likely cause</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_page(pipeline: Pipeline, st: Status | None, refresh: float) -> str:
    title = f"Stylus · {escape(pipeline.pipeline)}"
    head = (f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh:g}">'
            f"<title>{title}</title><style>body{{font-family:sans-serif;margin:20px;color:#222}}"
            "table{border-collapse:collapse;margin:6px 0 18px}td,th{border:1px solid #ccc;padding:3px 8px;"
            "text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}.firing{color:#922b21;"
            "font-weight:bold}.pending{color:#b9770e}.cause{background:#fdedec;border:2px solid #922b21;"
            "padding:8px;display:inline-block}</style></head><body>")
    if st is None:
        return head + f"<h1>{title}</h1><p id='waiting'>collecting the first sample…</p></body></html>"
    out = [head, f"<h1>{title}</h1>"]
    if st.error:
        out.append(f'<p class="firing" id="error">last poll failed: {escape(st.error)}</p>')
    if st.likely_cause:
        out.append(f'<p class="cause" id="likely-cause">likely cause: <b>{escape(st.likely_cause)}</b> '
                   "(the furthest-upstream lagging processor; downstream lag follows from it)</p>")
    out.append(render_svg(pipeline, st))
    out.append('<h2>alerts</h2><ul id="alerts">')
    if not st.alerts:
        out.append("<li>none</li>")
    for a in st.alerts:
        state = "firing" if a.firing else "pending"
        out.append(f'<li class="{state}" data-alert="{escape(a.name)}" data-processor="{escape(a.processor)}">'
                   f"{state.upper()} {escape(a.name)} on {escape(a.processor)}: {escape(a.detail)}</li>")
    out.append("</ul><h2>processors</h2>")
    for name, proc in st.processors.items():
        out.append(f'<h3>{escape(name)}</h3><p>lag {proc["lag_messages"]} records, oldest unprocessed '
                   f'{fmt_secs(proc["lag_seconds"])} old (alert above {fmt_secs(proc["threshold_seconds"])}), '
                   f'consuming {proc["rate_in"]:.1f} records/s</p>')
        out.append(f'<table data-processor="{escape(name)}"><tr><th class="l">topic</th><th>partition</th>'
                   "<th>committed</th><th>end</th><th>lag</th><th>lag seconds</th></tr>")
        for p in proc["partitions"]:
            committed = "-" if p["committed"] is None else p["committed"]
            out.append(f'<tr><td class="l">{escape(p["topic"])}</td><td>{p["partition"]}</td><td>{committed}</td>'
                       f'<td>{p["end"]}</td><td class="lag">{p["lag_messages"]}</td>'
                       f'<td>{p["lag_seconds"]:.1f}</td></tr>')
        out.append("</table>")
    out.append("</body></html>")
    return "".join(out)


def status_json(st: Status | None) -> dict[str, Any]:
    if st is None:
        return {"ready": False}
    return {"ready": True, "at": st.at, "processors": st.processors, "edges": st.edges,
            "alerts": [asdict(a) for a in st.alerts], "likely_cause": st.likely_cause, "error": st.error}


class StatusServer:
    """Serves the page for `pipeline`, sampling Kafka at `bootstrap` every `interval` seconds."""

    def __init__(self, pipeline: Pipeline, bootstrap: str, port: int = 0, host: str = "127.0.0.1",
                 interval: float = 2.0, window: float = 10.0) -> None:
        self.pipeline = pipeline
        self.poller = StatusPoller(pipeline, bootstrap, interval=interval, window=window)
        self.refresh = max(1.0, interval)
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="stylus-ui", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                st = server.poller.status()
                if path == "/":
                    body = render_page(server.pipeline, st, server.refresh).encode()
                    self._send(200, "text/html; charset=utf-8", body)
                elif path == "/api/status":
                    self._send(200, "application/json", json.dumps(status_json(st)).encode())
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("ui: " + format, *args)

        return Handler

    def start(self) -> StatusServer:
        self.poller.start()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.poller.close()
