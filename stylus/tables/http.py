"""`stylus serve`'s HTTP side: `GET /tables/NAME/KEY` answered from this instance or forwarded to the owner.

The standard library's ThreadingHTTPServer, as the status page and the metrics endpoint use: no web
framework to install for one route, and the work per request is a RocksDB point read (a few microseconds)
or one forwarded request over a kept-alive connection. HTTP/1.1 keep-alive, one thread per connection,
Nagle off, each response written in one call. Figures: BENCHMARKS.md, "Serving tables".
"""

from __future__ import annotations

import http.client
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from stylus.tables.serving import Answer, ServingInstance, error_answer

log = logging.getLogger(__name__)

FORWARDED = "X-Stylus-Forwarded"  # set on a forwarded request: its receiver answers itself, never forwards
SERVED_BY = "X-Stylus-Served-By"  # the address of the instance whose copy answered
FORWARD_TIMEOUT = 5.0

_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable", 400: "Bad Request", 502: "Bad Gateway"}


class TableServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, host: str, port: int) -> None:
        super().__init__((host, port), _Handler)
        self.instance: ServingInstance | None = None  # set once the instance knows its advertised address
        self._local = threading.local()  # per request thread: kept-alive connections to the other instances

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def forward(self, address: str, path: str) -> Answer:
        """The request, asked of the instance at `address`; its answer as is (503 if it cannot be reached)."""
        pool: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault("pool", {})
        for attempt in (1, 2):  # a kept-alive connection the other side closed: once more on a new one
            conn = pool.get(address)
            if conn is None:
                host, _, port = address.rpartition(":")
                conn = pool[address] = http.client.HTTPConnection(host, int(port), timeout=FORWARD_TIMEOUT)
            try:
                conn.request("GET", path, headers={FORWARDED: "1"})
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                pool.pop(address, None)
                if attempt == 2:
                    log.warning("serve: forwarding to %s failed: %s", address, exc)
                    return error_answer(503, f"the owner {address} did not answer: retry", ("Retry-After", "1"))
                continue
            headers = tuple((k, v) for k, v in response.getheaders() if k in ("Retry-After", SERVED_BY))
            return Answer(response.status, body, headers)
        raise AssertionError("unreachable")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    server: TableServer

    def do_GET(self) -> None:
        instance = self.server.instance
        parts = self.path.split("?", 1)[0].split("/", 3)
        if instance is None:
            answer = error_answer(503, "starting: retry", ("Retry-After", "1"))
        elif len(parts) != 4 or parts[0] or parts[1] != "tables" or not parts[2] or not parts[3]:
            answer = error_answer(404, "use GET /tables/NAME/KEY")
        else:
            answer = instance.lookup(unquote(parts[2]), unquote(parts[3]),
                                     forwarded=self.headers.get(FORWARDED) is not None)
            if answer.forward_to is not None:
                answer = self.server.forward(answer.forward_to, self.path)
        self._send(answer, instance)

    def _send(self, answer: Answer, instance: ServingInstance | None) -> None:
        headers = dict(answer.headers)
        if SERVED_BY not in headers and instance is not None and answer.status in (200, 404):
            headers[SERVED_BY] = instance.address
        head = [f"HTTP/1.1 {answer.status} {_REASONS.get(answer.status, 'Unknown')}",
                "Content-Type: application/json", f"Content-Length: {len(answer.body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would cost more than the lookup
