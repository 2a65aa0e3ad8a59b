"""The forwarding client against a real HTTP peer on loopback: kept-alive connections reused, the owner's
answer passed on as is, and 503 with Retry-After whenever the owner does not answer in full."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from stylus.tables.forward import Forwarder
from tests.support.net import closed_port

OK = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n"
      b"X-Stylus-Served-By: 127.0.0.1:1\r\nX-Other: dropped\r\n\r\n{\"v\": 42}")
MOVING = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\nRetry-After: 1\r\n\r\n{}")
HANG = "hang"  # never answer


@dataclass(frozen=True)
class Cut:
    """Write these bytes (maybe nothing), then close the connection."""

    data: bytes = b""


#: what the peer does with the n-th request (from 1) on one of its connections: answer these bytes and keep
#: the connection, Cut, or HANG
Behaviour = Callable[[int], "bytes | Cut | str"]


class Peer:
    """An HTTP/1.1 server that counts its connections and records its requests."""

    def __init__(self, behaviour: Behaviour, delay: float = 0.0) -> None:
        self.behaviour, self.delay = behaviour, delay
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.CancelledError, asyncio.IncompleteReadError, ConnectionError):
            n = 0
            while True:
                self.requests.append(await reader.readuntil(b"\r\n\r\n"))
                n += 1
                await asyncio.sleep(self.delay)
                answer = self.behaviour(n)
                if answer == HANG:
                    await asyncio.sleep(3600)
                writer.write(answer.data if isinstance(answer, Cut) else answer)  # type: ignore[arg-type]
                await writer.drain()
                if isinstance(answer, Cut):
                    break
        writer.close()


def _run(peer: Peer, body: Callable[[str], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            return await body(address)
        finally:
            server.close()

    return asyncio.run(main())


def test_sequential_requests_share_one_kept_alive_connection_and_the_answer_passes_as_is() -> None:
    peer = Peer(lambda n: OK)
    forwarder = Forwarder()

    async def body(address: str) -> list[Any]:
        try:
            return [await forwarder.get(address, b"/tables/dims/k%d" % i) for i in range(50)]
        finally:
            forwarder.close()

    answers = _run(peer, body)
    assert {(a.status, a.body, a.headers) for a in answers} == {
        (200, b'{"v": 42}', (("X-Stylus-Served-By", "127.0.0.1:1"),))}
    assert peer.connections == 1 and forwarder.opened == 1
    assert len(peer.requests) == 50
    assert peer.requests[7].startswith(b"GET /tables/dims/k7 HTTP/1.1\r\n")
    assert b"\r\nX-Stylus-Forwarded: 1\r\n" in peer.requests[7]


def test_concurrent_requests_open_one_connection_each_and_reuse_them() -> None:
    peer = Peer(lambda n: OK, delay=0.05)  # slow enough that the 20 requests of a round overlap
    forwarder = Forwarder()

    async def body(address: str) -> None:
        for _ in range(3):
            answers = await asyncio.gather(*(forwarder.get(address, b"/tables/dims/k") for _ in range(20)))
            assert {a.status for a in answers} == {200}
        forwarder.close()

    _run(peer, body)
    assert peer.connections == forwarder.opened == 20
    assert len(peer.requests) == 60


def test_a_kept_alive_connection_the_owner_dropped_is_retried_once_on_a_new_one() -> None:
    peer = Peer(lambda n: OK if n == 1 else Cut())  # each connection answers once, then closes on the next ask
    forwarder = Forwarder()

    async def body(address: str) -> list[Any]:
        return [await forwarder.get(address, b"/tables/dims/k") for _ in range(3)]

    answers = _run(peer, body)
    assert [a.status for a in answers] == [200, 200, 200]
    assert peer.connections == forwarder.opened == 3  # requests 2 and 3: the old connection, then a new one
    assert len(peer.requests) == 5


FAILURES: dict[str, Cut | str] = {"closed": Cut(), "closed mid-answer": Cut(OK[:40]), "no answer": HANG}


@pytest.mark.parametrize(("failure", "reused"), [
    (failure, reused) for failure in FAILURES for reused in (False, True)
    if (failure, reused) != ("closed", True)  # the one case retried: the test above
])
def test_an_owner_that_does_not_answer_in_full_gives_503_with_retry_after(failure: str, reused: bool) -> None:
    first = 2 if reused else 1  # the request that meets the failure
    peer = Peer(lambda n: OK if n < first else FAILURES[failure])
    forwarder = Forwarder(timeout=0.3)

    async def body(address: str) -> Any:
        if reused:
            assert (await forwarder.get(address, b"/tables/dims/k")).status == 200
        return await forwarder.get(address, b"/tables/dims/k")

    answer = _run(peer, body)
    assert answer.status == 503 and ("Retry-After", "1") in answer.headers
    assert b"did not answer: retry" in answer.body
    assert len(peer.requests) == first  # not asked again: the owner may have seen the request


def test_the_owners_own_503_passes_on_with_its_retry_after() -> None:
    answer = _run(Peer(lambda n: MOVING), lambda address: Forwarder().get(address, b"/tables/dims/k"))
    assert (answer.status, answer.body, answer.headers) == (503, b"{}", (("Retry-After", "1"),))


def test_an_unreachable_owner_gives_503() -> None:
    async def main() -> Any:
        return await Forwarder(timeout=1.0).get(f"127.0.0.1:{closed_port()}", b"/tables/dims/k")

    answer = asyncio.run(main())
    assert answer.status == 503 and ("Retry-After", "1") in answer.headers
