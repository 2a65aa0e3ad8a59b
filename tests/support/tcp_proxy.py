"""A TCP proxy in front of the embedded broker that can cut every connection on demand, as a network
blip or a broker restart would. The broker advertises the proxy's port, so every client connection,
bootstrap and per-broker alike, goes through it."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time


class TcpProxy:
    def __init__(self, target_port: int, port: int) -> None:
        self.target_port = target_port
        self.port = port
        self.server = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.server.settimeout(0.2)
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.refuse_until = 0.0
        self.drops = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def drop_all(self, refuse_for: float = 0.0) -> int:
        """Abort every open connection; refuse new ones for `refuse_for` seconds."""
        self.refuse_until = time.monotonic() + refuse_for
        with self.lock:
            victims, self.sockets = self.sockets, []
        for sock in victims:
            _reset(sock)
        self.drops += 1
        return len(victims)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(2)
        self.server.close()
        self.drop_all()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if time.monotonic() < self.refuse_until:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self.lock:
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _reset(dst)


def _reset(sock: socket.socket) -> None:
    """Abort the connection: wake any thread blocked on it (shutdown), then close without lingering (RST)."""
    for step in (lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)),
                 lambda: sock.shutdown(socket.SHUT_RDWR), sock.close):
        with contextlib.suppress(OSError):
            step()
