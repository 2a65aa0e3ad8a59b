"""A latency-injecting TCP proxy for benchmarks: the embedded broker made to look remote.

    .venv/bin/python -m bench.latency_proxy --port 19093 --target 9092 --delay-ms 5

Every chunk read from either side is written to the other side `delay` later (a fixed one-way delay, so a
request/response round trip costs 2 x delay more than on loopback). Each direction is a delay line: a FIFO
of (due time, bytes) drained by one timer, so chunks keep their order and many are in flight at once; the
proxy adds latency, not a bandwidth limit (a sleep per chunk would serialise the stream and turn latency
into throughput loss). It runs in its own process (asyncio, one thread) so that its CPU does not compete
for the benchmark's GIL, and that process's CPU time is readable (`LatencyProxy.cpu_seconds`).

With `EmbeddedBroker(advertised_port=proxy.port)` every client connection, bootstrap and per-broker alike,
goes through the proxy (`proxied_broker`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from stylus.kafka.broker import EmbeddedBroker, free_port, terminate

ROOT = Path(__file__).resolve().parents[1]


class DelayLine:
    """One direction of one connection: chunks leave `delay` seconds after they arrived, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.queue: deque[tuple[float, bytes | None]] = deque()  # None: the source closed
        self.dest: asyncio.Transport | None = None  # set once connected; until then chunks wait
        self.timer: asyncio.TimerHandle | None = None

    def push(self, data: bytes | None) -> None:
        self.queue.append((self.loop.time() + self.delay, data))
        if self.timer is None and self.dest is not None:
            self.timer = self.loop.call_at(self.queue[0][0], self._fire)

    def attach(self, dest: asyncio.Transport) -> None:
        self.dest = dest
        if self.queue and self.timer is None:
            self.timer = self.loop.call_at(self.queue[0][0], self._fire)

    def _fire(self) -> None:
        """Write every chunk that is due (one write call per batch), then sleep until the next is."""
        self.timer = None
        assert self.dest is not None
        now = self.loop.time()
        due: list[bytes] = []
        while self.queue and self.queue[0][0] <= now:
            data = self.queue.popleft()[1]
            if data is None:
                if due:
                    self.dest.writelines(due)
                self.dest.close()  # flushes what is buffered, then closes
                self.queue.clear()
                return
            due.append(data)
        if due:
            self.dest.writelines(due)
        if self.queue:
            self.timer = self.loop.call_at(self.queue[0][0], self._fire)


class _Side(asyncio.Protocol):
    """One socket of a proxied connection; what it reads goes into `out`, the line towards the peer."""

    def __init__(self, out: DelayLine) -> None:
        self.out = out
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.out.push(data)

    def eof_received(self) -> bool:
        return False  # close our side; the peer is closed once the delayed data ahead of the EOF is written

    def connection_lost(self, exc: Exception | None) -> None:
        self.out.push(None)

    # the peer's socket is full: stop reading here (TCP backpressure through the proxy)
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve(port: int, target_port: int, delay: float, ready: asyncio.Event | None = None) -> None:
    """Accept on 127.0.0.1:port, forward each connection to 127.0.0.1:target_port, `delay` each way."""
    loop = asyncio.get_running_loop()
    connecting: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    def accept() -> _Side:
        up, down = DelayLine(loop, delay), DelayLine(loop, delay)
        client = _Side(up)

        async def connect() -> None:
            try:
                _, server = await loop.create_connection(lambda: _Side(down), "127.0.0.1", target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.abort()
                return
            assert client.transport is not None and server.transport is not None
            client.peer, server.peer = server, client
            up.attach(server.transport)
            down.attach(client.transport)

        task = loop.create_task(connect())
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    server = await loop.create_server(accept, "127.0.0.1", port)
    async with server:
        if ready is not None:
            ready.set()
        await server.serve_forever()


class LatencyProxy:
    """The proxy in a child process; `port` is where it listens. Use as a context manager."""

    def __init__(self, target_port: int, delay_ms: float, port: int | None = None) -> None:
        self.target_port = target_port
        self.delay_ms = delay_ms
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> LatencyProxy:
        cmd = [sys.executable, "-m", "bench.latency_proxy", "--port", str(self.port),
               "--target", str(self.target_port), "--delay-ms", str(self.delay_ms)]
        self.process = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            self.stop()
            raise RuntimeError("the latency proxy did not start")
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU time of the proxy process so far (Linux /proc)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None:
            return
        terminate(proc)

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def proxied_broker(delay_ms: float) -> Iterator[tuple[EmbeddedBroker, LatencyProxy]]:
    """An embedded broker that advertises the proxy's port: every client talks to it `delay_ms` away."""
    proxy = LatencyProxy(0, delay_ms)
    broker = EmbeddedBroker(advertised_port=proxy.port)
    proxy.target_port = broker.port
    with proxy, broker:
        yield broker, proxy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="listen on 127.0.0.1:PORT")
    parser.add_argument("--target", type=int, required=True, help="forward to 127.0.0.1:TARGET")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay, each direction")
    args = parser.parse_args()

    async def run() -> None:
        ready = asyncio.Event()
        task = asyncio.create_task(serve(args.port, args.target, args.delay_ms / 1000, ready))
        # SIGTERM (LatencyProxy.stop) ends the server between callbacks, not inside one
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await ready.wait()
        print("ready", flush=True)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
