"""`python -m stylus.deploy.healthcheck`: 0 on 2xx, 1 on an error status or nothing listening."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from stylus.deploy.healthcheck import main


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


def test_status(server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["--port", str(server)]) == 0
    assert main(["--port", str(server), "--path", "/readyz"]) == 1
    monkeypatch.setenv("STYLUS_METRICS_PORT", str(server))  # what the Dockerfile's HEALTHCHECK relies on
    assert main([]) == 0


def test_nothing_listening() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["--port", str(port), "--timeout", "1"]) == 1
