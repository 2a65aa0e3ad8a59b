"""Forwarding a lookup to the instance that owns the key's partition, over kept-alive HTTP/1.1 connections.

Runs on the serving event loop (stylus/tables/http.py); the responses are parsed by httptools, the parser
under uvicorn. A pool per owner address: a forwarded request takes an idle connection (or opens one), sends
one GET, reads one response and puts the connection back, so there are as many connections to an owner as
requests forwarded to it at the same moment, each reused for the next. No pipelining, no redirects, no
cookies: the peer is another `stylus serve`, and a general-purpose client's per-request bookkeeping would
cost more than the lookup it carries.

What can go wrong answers 503 with Retry-After, never a guess: the owner unreachable, slower than the
timeout, or closing the connection mid-answer. A kept-alive connection the owner closed while it sat idle is
retried once on a new connection (a GET: asking again is harmless).
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import httptools

from stylus.tables.serving import Answer, error_answer

log = logging.getLogger(__name__)

FORWARDED = "X-Stylus-Forwarded"  # set on a forwarded request: its receiver answers itself, never forwards
SERVED_BY = "X-Stylus-Served-By"  # the address of the instance whose copy answered
TIMEOUT = 5.0  # seconds for the owner's answer
IDLE_PER_OWNER = 64  # idle connections kept per owner; more at once are closed after their request
_PASSED_ON = {b"retry-after": "Retry-After", SERVED_BY.lower().encode(): SERVED_BY}  # the owner's headers kept


class OwnerUnreachable(ConnectionError):
    """The connection failed or closed before a whole response arrived."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered  # some of a response had arrived: the request reached the owner


class Forwarder:
    """Kept-alive connections to the other instances; used from the event loop's thread only."""

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self.idle: dict[str, list[_Connection]] = {}
        self.opened = 0  # connections opened so far (the tests check that they are reused)

    async def get(self, address: str, target: bytes) -> Answer:
        """`GET target` asked of the instance at `address` (HOST:PORT); its answer as is, or 503."""
        request = b"GET %s HTTP/1.1\r\nHost: %s\r\n%s: 1\r\n\r\n" % (target, address.encode(), FORWARDED.encode())
        try:
            conn = self._idle(address)
            if conn is not None:
                try:
                    return self._done(address, conn, await self._ask(conn, request))
                except OwnerUnreachable as exc:
                    if exc.answered:
                        raise
            conn = await self._open(address)
            return self._done(address, conn, await self._ask(conn, request))
        except OSError as exc:  # TimeoutError included
            log.warning("serve: forwarding to %s failed: %s", address, exc or type(exc).__name__)
            return error_answer(503, f"the owner {address} did not answer: retry", ("Retry-After", "1"))

    def close(self) -> None:
        for idle in self.idle.values():
            for conn in idle:
                conn.close()
        self.idle.clear()

    def _idle(self, address: str) -> _Connection | None:
        idle = self.idle.get(address)
        while idle:  # the most recently used first: the least likely to have been closed by the owner
            conn = idle.pop()
            if conn.usable:
                return conn
        return None

    async def _ask(self, conn: _Connection, request: bytes) -> Answer:
        try:
            return await conn.send(request, self.timeout)
        except BaseException:  # failed, timed out, or the asking request cancelled: the connection is done
            conn.close()
            raise

    def _done(self, address: str, conn: _Connection, answer: Answer) -> Answer:
        idle = self.idle.setdefault(address, [])
        if conn.usable and len(idle) < IDLE_PER_OWNER:
            idle.append(conn)
        else:
            conn.close()
        return answer

    async def _open(self, address: str) -> _Connection:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(_Connection, host.strip("[]"), int(port)), self.timeout)
        self.opened += 1
        return conn


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.keep_alive = True
        self.started = False  # a byte of the current response has arrived
        self.headers: list[tuple[str, str]] = []
        self.body: list[bytes] = []

    @property
    def usable(self) -> bool:
        return self.transport is not None and self.keep_alive and not self.transport.is_closing()

    def send(self, request: bytes, timeout: float) -> asyncio.Future[Answer]:
        assert self.transport is not None and self.waiter is None
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.timer = loop.call_later(timeout, self._timed_out, timeout)
        self.started, self.headers, self.body = False, [], []
        self.transport.write(request)
        return self.waiter

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()

    # ---------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.close()
            return
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(OwnerUnreachable(f"unreadable answer: {exc}", answered=True))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        self._fail(OwnerUnreachable(f"connection closed ({exc or 'by the owner'})", answered=self.started))

    # ---------------------------------------------------------------- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        kept = _PASSED_ON.get(name.lower())
        if kept is not None:
            self.headers.append((kept, value.decode("latin-1")))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        answer = Answer(self.parser.get_status_code(), b"".join(self.body), tuple(self.headers))
        waiter, self.waiter = self.waiter, None
        self._stop_timer()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # ----------------------------------------------------------------
    def _timed_out(self, timeout: float) -> None:
        self._fail(TimeoutError(f"no answer in {timeout:g} s"))
        self.close()

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        self._stop_timer()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
