"""`stylus serve`'s HTTP side: `GET /tables/NAME/KEY` answered from this instance or forwarded to the owner.

uvicorn (httptools parser, uvloop) with a plain ASGI callable, no framework: one event loop on one thread of
its own answers every connection. A lookup is a RocksDB point read done inline on that loop (microseconds,
nothing to wait for); a forwarded lookup awaits the owner's answer on a kept-alive connection
(stylus/tables/forward.py) while the loop answers the others. The Kafka side runs on another thread
(stylus/tables/serving.py) and shares nothing with this one but whole values it replaces: no queue between
them. Figures: BENCHMARKS.md, "Tables: catch-up after a restart, and serving".
"""

from __future__ import annotations

import socket
import threading
from typing import Any
from urllib.parse import unquote

import uvicorn
import uvloop

from stylus.tables.forward import FORWARDED, SERVED_BY, Forwarder
from stylus.tables.serving import Answer, ServingInstance, error_answer

_FORWARDED = FORWARDED.lower().encode()
_CONTENT_TYPE = (b"content-type", b"application/json")
_ALLOW = (b"allow", b"GET")
BACKLOG = 1024


class TableApp:
    """The ASGI application: one route, JSON answers."""

    def __init__(self) -> None:
        self.instance: ServingInstance | None = None  # set once the instance has opened its tables
        self.forwarder = Forwarder()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        answer, instance = await self.answer(scope), self.instance
        headers = [_CONTENT_TYPE, (b"content-length", b"%d" % len(answer.body))]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        if answer.status in (200, 404) and instance is not None and not any(k == SERVED_BY for k, _ in answer.headers):
            headers.append((b"x-stylus-served-by", instance.address.encode()))
        if answer.status == 405:
            headers.append(_ALLOW)
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})

    async def answer(self, scope: dict[str, Any]) -> Answer:
        instance = self.instance
        raw_path: bytes = scope["raw_path"]
        parts = raw_path.split(b"/", 3)
        if scope["method"] != "GET":
            return error_answer(405, "only GET /tables/NAME/KEY")
        if instance is None:
            return error_answer(503, "starting: retry", ("Retry-After", "1"))
        if len(parts) != 4 or parts[0] or parts[1] != b"tables" or not parts[2] or not parts[3]:
            return error_answer(404, "use GET /tables/NAME/KEY")
        forwarded = any(name == _FORWARDED for name, _ in scope["headers"])
        answer = instance.lookup(unquote(parts[2].decode("latin-1")), unquote(parts[3].decode("latin-1")),
                                 forwarded=forwarded)
        if answer.forward_to is None:
            return answer
        query: bytes = scope["query_string"]
        return await self.forwarder.get(answer.forward_to, raw_path + b"?" + query if query else raw_path)


class TableServer:
    """The HTTP server on a thread of its own. The socket listens from the start, so `port` is known before
    the instance is made (`--port 0`) and no connection is refused while the loop starts."""

    def __init__(self, host: str, port: int) -> None:
        self.app = TableApp()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(BACKLOG)  # connections wait in the backlog until the loop runs
        except OSError:
            self.socket.close()
            raise
        config = uvicorn.Config(self.app, loop="uvloop", http="httptools", ws="none", lifespan="off",
                                log_config=None, log_level="warning", access_log=False, server_header=False,
                                proxy_headers=False,
                                backlog=BACKLOG, timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="stylus-serve-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    @property
    def instance(self) -> ServingInstance | None:
        return self.app.instance

    @instance.setter
    def instance(self, instance: ServingInstance) -> None:
        self.app.instance = instance

    def start(self) -> TableServer:
        """Listen and answer (503 until `instance` is set)."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let the requests in flight finish, close every connection."""
        self._server.should_exit = True  # read by uvicorn's loop on its next tick (0.1 s)
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.socket.close()

    def _run(self) -> None:
        uvloop.run(self._serve())

    async def _serve(self) -> None:
        try:
            await self._server.serve(sockets=[self.socket])
        finally:
            self.app.forwarder.close()
