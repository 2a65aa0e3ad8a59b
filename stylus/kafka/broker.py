"""The embedded broker: Apache Kafka itself (jars from Maven, `jvm/kafka/pom.xml`), one KRaft node that is
broker and controller at once, run as a child JVM on free loopback ports.

It is what `stylus broker`, every command without `bootstrap.servers`, the tests and the benchmarks use.
Settings are those of a one-node cluster (replication factor 1 for the internal topics, few of their
partitions, no rebalance delay); everything else is Kafka's default, so behaviour here is what a cluster shows.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from types import TracebackType

from stylus.kafka.jars import classpath, java_binary

log = logging.getLogger(__name__)

#: JVM heap of the embedded broker (a `-Xmx` value).
HEAP_ENV = "STYLUS_BROKER_HEAP"
#: log4j level of the broker's own log (INFO by default; DEBUG shows every request).
LOG_LEVEL_ENV = "STYLUS_BROKER_LOG_LEVEL"

#: One node: the internal topics cannot have more replicas than that, and fewer partitions start sooner.
ONE_NODE_SETTINGS: dict[str, str | int] = {
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 4,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
    # development clients may ask for short sessions (a killed member leaves sooner); Kafka's floor is 6 s
    "group.min.session.timeout.ms": 1000,
    # records are kept until a topic's own `retention.ms` says otherwise: development and test data carry
    # timestamps of any age (Kafka's default, 7 days, would delete a replayed 2023 log at once)
    "log.retention.ms": -1,
    # retention is applied within a second of a segment expiring, not five minutes later
    "log.retention.check.interval.ms": 1000,
    "log.initial.task.delay.ms": 1000,
    # a record produced to a missing topic is an error, not a topic with the broker's default partitions
    "auto.create.topics.enable": "false",
    "num.network.threads": 2,
    "num.io.threads": 4,
}


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    """`count` distinct free ports on 127.0.0.1, none of them in `avoid`. The sockets stay open until all are
    chosen: the kernel may hand out again a port it has just freed (a broker once got the same port for two
    listeners, and did not start)."""
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in avoid and port not in ports:
                ports.append(port)
        return ports
    finally:
        for sock in sockets:
            sock.close()


class BrokerError(RuntimeError):
    pass


def new_cluster_id() -> str:
    """16 random bytes, URL-safe base64 without padding: the form KRaft's storage format takes."""
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class EmbeddedBroker:
    """Start with `start()` or as a context manager; `bootstrap` is the address to give clients.

    `data_dir` keeps the log across restarts (a temporary folder, removed at `stop()`, otherwise).
    `advertised_port` puts a proxy in front: clients are told to connect there (fault and latency tests),
    while the broker's own requests to itself go through an internal listener.
    """

    def __init__(self, port: int | None = None, *, data_dir: str | Path | None = None,
                 advertised_port: int | None = None, extra: dict[str, str | int] | None = None) -> None:
        given = {p for p in (port, advertised_port) if p}
        chosen = free_ports(3 - bool(port), avoid=given)
        self.port = port or chosen.pop()
        self.advertised_port = advertised_port or self.port
        self.controller_port, self.internal_port = chosen
        self.keep_data = data_dir is not None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="stylus-broker-"))
        self.extra = dict(extra or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def start(self, timeout: float = 60.0) -> EmbeddedBroker:
        began = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        properties = self._write_config()
        if not (self.data_dir / "log" / "meta.properties").exists():
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={new_cluster_id()}",
                       f"--config={properties}")
        with open(self.data_dir / "stdout.log", "ab") as out:
            self.process = subprocess.Popen(self._java_cmd("kafka.Kafka", str(properties)), stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(timeout)
        self.started_in = time.monotonic() - began
        log.info("Apache Kafka listening on %s (pid %d, ready in %.1f s); its log: %s",
                 self.bootstrap, self.process.pid, self.started_in, self.log_file)
        return self

    def _write_config(self) -> Path:
        listeners = {"PLAINTEXT": self.port, "INTERNAL": self.internal_port, "CONTROLLER": self.controller_port}
        settings: dict[str, str | int] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.advertised_port},"
                                    f"INTERNAL://127.0.0.1:{self.internal_port}",
            "listener.security.protocol.map": ",".join(f"{name}:PLAINTEXT" for name in listeners),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "log.dirs": str(self.data_dir / "log"),
            **ONE_NODE_SETTINGS,
            **self.extra,
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        level = os.environ.get(LOG_LEVEL_ENV, "INFO")
        (self.data_dir / "log4j2.properties").write_text(
            "appender.file.type = File\nappender.file.name = file\n"
            f"appender.file.fileName = {self.log_file}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            f"rootLogger.level = {level}\nrootLogger.appenderRef.file.ref = file\n"
            # one line per request at INFO is noise, not news
            "logger.request.name = kafka.request.logger\nlogger.request.level = WARN\n"
        )
        return path

    def _java_cmd(self, main: str, *args: str) -> list[str]:
        heap = os.environ.get(HEAP_ENV, "512m")
        return [java_binary(), f"-Xmx{heap}", "-Xms64m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                "-cp", classpath("kafka"), main, *args]

    def _java(self, main: str, *args: str) -> None:
        done = subprocess.run(self._java_cmd(main, *args), capture_output=True, timeout=120)
        if done.returncode != 0:
            raise BrokerError(f"{main} {' '.join(args)} failed ({done.returncode}): "
                              f"{(done.stdout + done.stderr).decode(errors='replace').strip()[-2000:]}")

    def _wait_ready(self, timeout: float) -> None:
        """Ready when an admin metadata call names this broker."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}", "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerError(f"Apache Kafka exited with code {self.process.returncode}; "
                                  f"see {self.log_file} and {self.data_dir / 'stdout.log'}")
            try:
                if admin.list_topics(timeout=1).brokers:
                    return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise BrokerError(f"Apache Kafka did not answer on {self.bootstrap} within {timeout}s; see {self.log_file}")

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BrokerError("the broker is not running")
        return self.process.pid

    def pause(self) -> None:
        """SIGSTOP the broker: clients see it hang, as with a stalled or partitioned broker."""
        if self.process:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process:
            self.process.send_signal(signal.SIGCONT)

    def restart(self, *, crash: bool = False) -> None:
        """Stop (SIGKILL when `crash`) and start again on the same ports and data."""
        if not self.keep_data:
            raise BrokerError("restart needs a broker started with data_dir (a temporary one is deleted at stop)")
        self.stop(kill=crash)
        self.start()

    def stop(self, *, kill: bool = False) -> None:
        """A clean shutdown (SIGTERM); `kill`, or a broker whose data is thrown away anyway, gets SIGKILL."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            if kill or not self.keep_data:
                proc.kill()
                proc.wait()
            else:
                terminate(proc, timeout=30)
        if not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self.process is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def terminate(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within `timeout`."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
