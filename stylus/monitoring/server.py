"""The metrics endpoint of `stylus run --metrics-port N`: /metrics, /healthz and /readyz.

A stdlib threading HTTP server on its own registry (not the global one), so several runners in one
process (tests) never collide. /healthz says the process is alive and no processor has failed;
/readyz says every processor has received its first partition assignment and is still running.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from stylus.monitoring.metrics import StylusCollector
from stylus.runtime.runner import PipelineRunner

log = logging.getLogger(__name__)


def health(runner: PipelineRunner) -> tuple[bool, dict[str, Any]]:
    """Alive unless a processor failed (dev mode then stops the process anyway)."""
    return (not runner.errors), {"failed": dict(runner.errors)}


def readiness(runner: PipelineRunner) -> tuple[bool, dict[str, Any]]:
    """Ready once every processor has joined its group and got an assignment, and none has stopped."""
    waiting = [n for n in runner.names if n not in runner.workers or not runner.workers[n].assigned_once]
    stopped = [n for n, w in runner.workers.items() if w.finished]
    ok = not waiting and not stopped and not runner.errors
    return ok, {"waiting_for_assignment": waiting, "stopped": stopped, "failed": dict(runner.errors)}


class MetricsServer:
    def __init__(self, runner: PipelineRunner, port: int, host: str = "127.0.0.1") -> None:
        self.runner = runner
        self.collector = StylusCollector(runner.pipeline, lambda: runner.workers, runner.bootstrap,
                                         errors=lambda: runner.errors)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        for extra in (ProcessCollector, PlatformCollector, GCCollector):
            extra(registry=self.registry)
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="stylus-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(server.registry))
                elif path in ("/healthz", "/readyz"):
                    ok, detail = (health if path == "/healthz" else readiness)(server.runner)
                    body = json.dumps({"status": "ok" if ok else "unavailable", **detail}).encode()
                    self._send(200 if ok else 503, "application/json", body)
                else:
                    self._send(404, "text/plain", b"try /metrics, /healthz or /readyz\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics: " + format, *args)

        return Handler

    def start(self) -> MetricsServer:
        self.thread.start()
        log.info("metrics on http://%s:%d/metrics", *self.httpd.server_address[:2])
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.collector.close()


@contextmanager
def serve_metrics(runner: PipelineRunner, port: int | None, host: str = "127.0.0.1") -> Iterator[MetricsServer | None]:
    """Serve while the block runs; a None port serves nothing."""
    if port is None:
        yield None
        return
    server = MetricsServer(runner, port, host).start()
    try:
        yield server
    finally:
        server.stop()
