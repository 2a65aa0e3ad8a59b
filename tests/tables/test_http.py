"""The HTTP side of `stylus serve` on its own (no tables yet): answers before the instance is ready, methods
other than GET, and a stop that closes the port. Lookups and forwarding: test_serve.py, test_forward.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import requests

from stylus.tables.http import TableServer


@pytest.fixture
def server() -> Iterator[TableServer]:
    made = TableServer("127.0.0.1", 0).start()
    yield made
    made.stop()


def test_a_server_without_its_tables_yet_answers_503_with_retry_after(server: TableServer) -> None:
    answer = requests.get(f"http://127.0.0.1:{server.port}/tables/dims/k1", timeout=10)
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "1"
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json() == {"error": "starting: retry"}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_only_get_is_answered(server: TableServer, method: str) -> None:
    answer = requests.request(method, f"http://127.0.0.1:{server.port}/tables/dims/k1", timeout=10)
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET"


def test_one_connection_is_kept_alive_across_requests(server: TableServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        for _ in range(3):
            conn.sendall(b"GET /tables/dims/k1 HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            assert head.startswith(b"HTTP/1.1 503 ")


def test_stop_closes_the_port() -> None:
    server = TableServer("127.0.0.1", 0).start()
    port = server.port
    assert requests.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 503
    server.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/", timeout=10)
