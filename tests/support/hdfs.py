"""A real HDFS for the backup tests: Hadoop's MiniDFSCluster (one NameNode + one DataNode in a child JVM).

The backup code speaks WebHDFS through the `hdfs` package, so what matters is the NameNode's HTTP port: a
backup URI `hdfs://127.0.0.1:<http port>/path` (see `stylus.state.backup.target.target_for`). Everything binds
to 127.0.0.1 and the DataNode registers as 127.0.0.1, so WebHDFS's 307 redirects to the DataNode are
reachable. Jars: `jvm/hdfs/pom.xml` (`make install` puts them in .jars/hdfs/).
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

import requests
from hdfs import InsecureClient

from stylus.kafka.broker import free_port
from stylus.kafka.jars import classpath, java_binary
from tests.support.proc import rss_mb

log = logging.getLogger(__name__)

#: Java 17 closes the JDK's internals, and Hadoop 3.4 reaches into some of them by reflection (direct buffer
#: cleanup, security and I/O helpers): the usual list for Hadoop and Spark on Java 17. The cluster started and
#: served the tests without them in a trial; they keep a rarer code path from an InaccessibleObjectException.
ADD_OPENS = [
    "java.base/java.lang", "java.base/java.lang.reflect", "java.base/java.io", "java.base/java.net",
    "java.base/java.nio", "java.base/java.util", "java.base/java.util.concurrent", "java.base/sun.nio.ch",
    "java.base/sun.security.action",
]

#: Settings of a one-node test cluster: nothing here changes what WebHDFS answers, only what it costs.
SETTINGS: dict[str, str | int] = {
    "dfs.permissions.enabled": "false",  # any user name may write anywhere, as with the test server
    "dfs.replication": 1,
    "dfs.namenode.handler.count": 4,
    "dfs.namenode.service.handler.count": 2,
    "dfs.datanode.handler.count": 4,
    # closing a file waits until the DataNode has reported the block; the writer (the DataNode's own client, for
    # WebHDFS) polls for that from 400 ms on, so half of all small writes took 0.4 s instead of 0.02 s
    "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": 20,
    # no periodic directory scans or full block reports during a test run
    "dfs.datanode.directoryscan.interval": 3600,
    "dfs.blockreport.intervalMsec": 3_600_000,
}

LOG4J = """\
log4j.rootLogger=INFO,file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=%d{{HH:mm:ss,SSS}} %p %c{{1}}: %m%n
# one audit line per request and one line per block are noise, not news
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace=WARN
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
"""


class MiniHdfsError(RuntimeError):
    pass


def _path_of(where: str) -> str:
    """`/p` from `/p` or from `hdfs://host:port/p`."""
    return urlsplit(where).path if "://" in where else where


class MiniHdfs:
    """Start with `start()` or as a context manager; `uri(path)` is a backup URI inside it.

    Faults a real cluster shows: `pause()` / `resume()` SIGSTOP / SIGCONT the JVM (connections are still
    accepted by the kernel, nothing answers: a hung cluster); `fill_quota(path)` / `clear_quota(path)` make the
    NameNode refuse every new file or directory under `path` (NSQuotaExceededException), as a full directory
    quota does, while reads, renames and deletes go on.
    """

    def __init__(self, *, heap: str = "256m") -> None:
        self.rpc_port = free_port()
        self.webhdfs_port = free_port()
        self.heap = heap
        self.dir = Path(tempfile.mkdtemp(prefix="stylus-hdfs-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None

    @property
    def url(self) -> str:
        """The NameNode's HTTP address, what `hdfs.InsecureClient` takes."""
        return f"http://127.0.0.1:{self.webhdfs_port}"

    def uri(self, path: str = "") -> str:
        """`hdfs://127.0.0.1:<http port>/<path>`: the form `target_for` and the pipelines' `backup.uri` take."""
        return f"hdfs://127.0.0.1:{self.webhdfs_port}/{path.lstrip('/')}"

    def fresh_uri(self, prefix: str = "t") -> str:
        """A URI under a new base path, so tests sharing the cluster never see each other's files."""
        return self.uri(f"{prefix}-{uuid.uuid4().hex[:12]}")

    @property
    def log_file(self) -> Path:
        return self.dir / "hdfs.log"

    @property
    def config_file(self) -> Path:
        """Written by MiniDFSClusterManager once the cluster is up."""
        return self.dir / "hdfs-site.xml"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise MiniHdfsError("the MiniDFSCluster is not running")
        return self.process.pid

    def rss_mb(self) -> float | None:
        return rss_mb(self.pid) if self.process is not None else None

    def start(self, timeout: float = 120.0) -> MiniHdfs:
        began = time.monotonic()
        (self.dir / "log4j.properties").write_text(LOG4J.format(log=self.log_file))
        (self.dir / "tmp").mkdir(exist_ok=True)
        with open(self.dir / "stdout.log", "ab") as out:
            self.process = subprocess.Popen(self._command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                                            start_new_session=True)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        log.info("MiniDFSCluster: WebHDFS on %s (pid %d, ready in %.1f s, %.0f MB RSS); its log: %s",
                 self.url, self.pid, self.started_in, self.rss_mb() or 0, self.log_file)
        return self

    def _command(self) -> list[str]:
        settings = [arg for k, v in SETTINGS.items() for arg in ("-D", f"{k}={v}")]
        return [java_binary(), f"-Xmx{self.heap}", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
                *(f"--add-opens={pkg}=ALL-UNNAMED" for pkg in ADD_OPENS),
                f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
                # MiniDFSCluster keeps its name and data directories under test.build.data
                f"-Dtest.build.data={self.dir / 'data'}", f"-Dhadoop.tmp.dir={self.dir / 'tmp'}",
                # Jetty unpacks its web apps there, and a SIGKILLed JVM does not clean up
                f"-Djava.io.tmpdir={self.dir / 'tmp'}",
                "-cp", classpath("hdfs"), "org.apache.hadoop.test.MiniDFSClusterManager",
                "-format", "-datanodes", "1", "-nnport", str(self.rpc_port), "-httpport", str(self.webhdfs_port),
                *settings, "-writeConfig", str(self.config_file)]

    def _wait_ready(self, timeout: float) -> None:
        """Ready when the config file is written and a small file goes through WebHDFS both ways (the
        NameNode answers and a DataNode is registered and accepts blocks)."""
        deadline = time.monotonic() + timeout
        client = self.client(timeout=5)
        probe, last = f"/.ready-{uuid.uuid4().hex[:8]}", "nothing yet"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise MiniHdfsError(f"the MiniDFSCluster exited with code {self.process.returncode}:\n{self.tail()}")
            if self.config_file.exists():
                try:
                    client.list("/")
                    client.write(probe, data=b"ready", overwrite=True)
                    with client.read(probe) as reader:
                        if reader.read() == b"ready":
                            client.delete(probe)
                            return
                except Exception as exc:  # not up yet: the next round tells
                    last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
        raise MiniHdfsError(f"the MiniDFSCluster did not serve WebHDFS on {self.url} within {timeout}s "
                            f"(last: {last}):\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        """The end of the cluster's log and of its stdout (where the JVM's own errors go)."""
        parts = []
        for path in (self.log_file, self.dir / "stdout.log"):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.name}\n" + "\n".join(line[:500] for line in text))  # Jersey's are huge
        return "\n".join(parts) or "(no log)"

    def pause(self) -> None:
        """SIGSTOP the cluster: every WebHDFS call hangs until `resume()`."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def fill_quota(self, where: str) -> None:
        """Set the namespace quota of `where` (a path, or a URI from `uri()`) to what it holds now: from here on
        the NameNode refuses any new name under it. The directory is created if needed."""
        path = _path_of(where)
        client = self.client()
        client.makedirs(path)
        summary = client.content(path)
        self._set_quota(path, int(summary["directoryCount"]) + int(summary["fileCount"]))

    def clear_quota(self, where: str) -> None:
        self._set_quota(_path_of(where), -1)  # -1: no quota

    def _set_quota(self, path: str, names: int) -> None:
        # the `hdfs` package has no SETQUOTA; it is a plain WebHDFS PUT (a superuser operation, open to anyone
        # with dfs.permissions.enabled=false)
        params: dict[str, str | int] = {"op": "SETQUOTA", "namespacequota": names, "storagespacequota": -1,
                                        "user.name": "stylus"}
        response = requests.put(f"{self.url}/webhdfs/v1{path}", params=params, timeout=10)
        if not response.ok:
            raise MiniHdfsError(f"SETQUOTA {path} {names}: {response.status_code} {response.text[:500]}")

    def client(self, user: str = "stylus", timeout: float = 10.0) -> InsecureClient:
        return InsecureClient(self.url, user=user, timeout=timeout)

    def stop(self) -> None:
        """SIGKILL (the data is thrown away anyway) and remove the temp dir."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()  # SIGKILL ends a paused (SIGSTOPped) JVM too
            proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> MiniHdfs:
        return self.start() if self.process is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
