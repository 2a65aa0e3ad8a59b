"""A small WebHDFS REST server for tests (no NameNode can be installed on these machines).

It follows the subset of https://hadoop.apache.org/docs/stable/hadoop-project-dist/hadoop-hdfs/WebHDFS.html
that the `hdfs` package's client uses: a "namenode" answers metadata operations and redirects
CREATE / APPEND / OPEN / GETFILECHECKSUM with a 307 to a separate "datanode" listener, which moves the
bytes. Errors are Java-style `RemoteException` JSON. Files live in a temporary directory.

Fault injection (for the outage path): `refuse(status)` answers every request with that status until
`heal()`; `hang(seconds)` delays every request by that long (or until `heal()`).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

PREFIX = "/webhdfs/v1"
JAVA_CLASSES = {
    "FileNotFoundException": "java.io.FileNotFoundException",
    "FileAlreadyExistsException": "org.apache.hadoop.fs.FileAlreadyExistsException",
    "PathIsNotEmptyDirectoryException": "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
    "IllegalArgumentException": "java.lang.IllegalArgumentException",
    "UnsupportedOperationException": "java.lang.UnsupportedOperationException",
    "IOException": "java.io.IOException",
    "RetriableException": "org.apache.hadoop.ipc.RetriableException",
    "ParentNotDirectoryException": "org.apache.hadoop.fs.ParentNotDirectoryException",
}


class RemoteError(Exception):
    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exception = exception
        self.message = message


class WebHdfsServer:
    """Namenode + datanode listeners on 127.0.0.1 over one directory. Use as a context manager."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.requests: list[tuple[str, str, str, int]] = []  # (listener, method, op, status)
        self._refuse_status: int | None = None
        self._hang_until = 0.0
        self._healed = threading.Event()
        self.namenode = _make_server(self, datanode=False)
        self.datanode = _make_server(self, datanode=True)
        self._threads = [
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            for s in (self.namenode, self.datanode)
        ]

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.namenode.server_address[1]}"

    @property
    def port(self) -> int:
        return int(self.namenode.server_address[1])

    @property
    def datanode_url(self) -> str:
        return f"http://127.0.0.1:{self.datanode.server_address[1]}"

    def start(self) -> WebHdfsServer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.heal()
        for server in (self.namenode, self.datanode):
            server.shutdown()
            server.server_close()

    def __enter__(self) -> WebHdfsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ fault injection
    def refuse(self, status: int = 503) -> None:
        """Answer every request with `status` (and a RemoteException body) until `heal()`."""
        self._healed.clear()
        self._refuse_status = status

    def hang(self, seconds: float) -> None:
        """Hold every request for `seconds` (or until `heal()`) before answering it normally."""
        self._healed.clear()
        self._hang_until = time.monotonic() + seconds

    def heal(self) -> None:
        self._refuse_status = None
        self._hang_until = 0.0
        self._healed.set()

    @contextmanager
    def refusing(self, status: int = 503) -> Iterator[None]:
        self.refuse(status)
        try:
            yield
        finally:
            self.heal()

    def _inject(self) -> None:
        wait = self._hang_until - time.monotonic()
        if wait > 0:
            self._healed.wait(wait)
        if self._refuse_status is not None:
            status = self._refuse_status
            exception = "RetriableException" if status == 503 else "IOException"
            raise RemoteError(status, exception, f"injected failure ({status})")

    # ------------------------------------------------------------------ file system
    def local(self, hdfs_path: str) -> Path:
        norm = posixpath.normpath("/" + hdfs_path.lstrip("/"))
        return self.root / norm.lstrip("/")

    def file_status(self, path: Path, suffix: str) -> dict[str, Any]:
        st = path.stat()
        is_dir = path.is_dir()
        return {
            "accessTime": 0 if is_dir else int(st.st_atime * 1000),
            "blockSize": 0 if is_dir else 134217728,
            "childrenNum": len(list(path.iterdir())) if is_dir else 0,
            "fileId": st.st_ino,
            "group": "supergroup",
            "length": 0 if is_dir else st.st_size,
            "modificationTime": int(st.st_mtime * 1000),
            "owner": "stylus",
            "pathSuffix": suffix,
            "permission": "755" if is_dir else "644",
            "replication": 0 if is_dir else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if is_dir else "FILE",
        }


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up on a hung request closed its socket: nothing to report."""
        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            return
        super().handle_error(request, client_address)


def _make_server(owner: WebHdfsServer, *, datanode: bool) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"owner": owner, "datanode": datanode})
    server = _Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    return server


class _Handler(BaseHTTPRequestHandler):
    owner: WebHdfsServer
    datanode: bool
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # every verb goes through one dispatcher
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        op = params.get("op", "").upper()
        try:
            if not parts.path.startswith(PREFIX):
                raise RemoteError(404, "FileNotFoundException", f"no such resource {parts.path}")
            hdfs_path = unquote(parts.path[len(PREFIX):]) or "/"
            self.owner._inject()
            body = self._read_body()
            if self.datanode:
                self._datanode(method, op, hdfs_path, params, body)
            else:
                self._namenode(method, op, hdfs_path, params)
        except RemoteError as err:
            self._json(err.status, {"RemoteException": {
                "exception": err.exception,
                "javaClassName": JAVA_CLASSES.get(err.exception, "java.io.IOException"),
                "message": err.message,
            }})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def send_response(self, code: int, message: str | None = None) -> None:
        """Record (listener, method, op, status) before the client can see the answer."""
        op = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}.get("op", "").upper()
        with self.owner.lock:
            self.owner.requests.append(("datanode" if self.datanode else "namenode", self.command, op, code))
        super().send_response(code, message)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # ------------------------------------------------------------------ responses
    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _redirect(self, hdfs_path: str, params: dict[str, str]) -> int:
        query = "&".join(f"{quote(k)}={quote(v)}" for k, v in params.items() if k != "user.name")
        location = f"{self.owner.datanode_url}{PREFIX}{quote(hdfs_path)}?{query}&namenoderpcaddress=localhost:8020"
        self.send_response(307)
        self.send_header("Location", location)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return 307

    # ------------------------------------------------------------------ namenode
    def _namenode(self, method: str, op: str, hdfs_path: str, params: dict[str, str]) -> int:
        owner = self.owner
        path = owner.local(hdfs_path)
        with owner.lock:
            if (method, op) in {("PUT", "CREATE"), ("POST", "APPEND"), ("GET", "OPEN"),
                                ("GET", "GETFILECHECKSUM")}:
                if op in {"APPEND", "OPEN", "GETFILECHECKSUM"} and not path.is_file():
                    raise RemoteError(404, "FileNotFoundException", f"File {hdfs_path} does not exist.")
                if op == "CREATE" and path.is_dir():
                    raise RemoteError(403, "FileAlreadyExistsException", f"{hdfs_path} already exists as a directory")
                return self._redirect(hdfs_path, params)
            if (method, op) == ("GET", "GETFILESTATUS"):
                _must_exist(path, hdfs_path)
                self._json(200, {"FileStatus": owner.file_status(path, "")})
            elif (method, op) == ("GET", "LISTSTATUS"):
                _must_exist(path, hdfs_path)
                if path.is_dir():
                    statuses = [owner.file_status(p, p.name) for p in sorted(path.iterdir())]
                else:
                    statuses = [owner.file_status(path, "")]
                self._json(200, {"FileStatuses": {"FileStatus": statuses}})
            elif (method, op) == ("GET", "GETCONTENTSUMMARY"):
                _must_exist(path, hdfs_path)
                files = [p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()]
                dirs = [p for p in path.rglob("*") if p.is_dir()] if path.is_dir() else []
                length = sum(p.stat().st_size for p in files)
                self._json(200, {"ContentSummary": {
                    "directoryCount": len(dirs) + int(path.is_dir()), "fileCount": len(files), "length": length,
                    "quota": -1, "spaceConsumed": length, "spaceQuota": -1}})
            elif (method, op) == ("GET", "GETHOMEDIRECTORY"):
                self._json(200, {"Path": f"/user/{params.get('user.name', 'stylus')}"})
            elif (method, op) == ("PUT", "MKDIRS"):
                if path.is_file() or any(p.is_file() for p in path.parents if p != owner.root):
                    raise RemoteError(403, "ParentNotDirectoryException", f"{hdfs_path}: a parent is a file")
                path.mkdir(parents=True, exist_ok=True)
                self._json(200, {"boolean": True})
            elif (method, op) == ("DELETE", "DELETE"):
                recursive = params.get("recursive", "").lower() == "true"
                self._json(200, {"boolean": self._delete(path, hdfs_path, recursive)})
            elif (method, op) == ("PUT", "RENAME"):
                self._json(200, {"boolean": self._rename(path, params.get("destination", ""))})
            else:
                raise RemoteError(400, "IllegalArgumentException",
                                  f"Invalid value for webhdfs parameter \"op\": {method} {op}")
        return 200

    def _delete(self, path: Path, hdfs_path: str, recursive: bool) -> bool:
        if path == self.owner.root:
            raise RemoteError(403, "IOException", "cannot delete the root")
        if not path.exists():
            return False
        if path.is_dir():
            if any(path.iterdir()) and not recursive:
                raise RemoteError(403, "PathIsNotEmptyDirectoryException", f"`{hdfs_path} is non empty': "
                                  "Directory is not empty")
            shutil.rmtree(path)
        else:
            path.unlink()
        return True

    def _rename(self, src: Path, destination: str) -> bool:
        """HDFS rules: into an existing directory; false if the target is a file or its parent is missing."""
        if not destination.startswith("/"):
            raise RemoteError(400, "IllegalArgumentException", f"Invalid value for destination: {destination}")
        dst = self.owner.local(destination)
        if not src.exists() or src == self.owner.root:
            return False
        if dst.is_dir():
            dst = dst / src.name
        if dst.exists() or not dst.parent.is_dir():
            return False
        src.rename(dst)
        return True

    # ------------------------------------------------------------------ datanode
    def _datanode(self, method: str, op: str, hdfs_path: str, params: dict[str, str], body: bytes) -> int:
        owner = self.owner
        path = owner.local(hdfs_path)
        if (method, op) == ("PUT", "CREATE"):
            with owner.lock:
                if path.exists() and params.get("overwrite", "false").lower() != "true":
                    raise RemoteError(403, "FileAlreadyExistsException", f"{hdfs_path} for client already exists")
                if path.is_dir():
                    raise RemoteError(403, "FileAlreadyExistsException", f"{hdfs_path} is a directory")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(body)
            self.send_response(201)
            self.send_header("Location", f"hdfs://localhost:8020{quote(hdfs_path)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return 201
        if (method, op) == ("POST", "APPEND"):
            with owner.lock:
                _must_be_file(path, hdfs_path)
                with path.open("ab") as fh:
                    fh.write(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return 200
        if (method, op) == ("GET", "OPEN"):
            with owner.lock:
                _must_be_file(path, hdfs_path)
                data = path.read_bytes()
            offset = int(params.get("offset") or 0)
            length = params.get("length")
            data = data[offset:] if not length else data[offset:offset + int(length)]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return 200
        if (method, op) == ("GET", "GETFILECHECKSUM"):
            with owner.lock:
                _must_be_file(path, hdfs_path)
                digest = hashlib.md5(path.read_bytes()).hexdigest()
            # Real HDFS answers MD5-of-MD5-of-CRC32C (28 bytes); this stand-in keeps the shape, not the algorithm.
            self._json(200, {"FileChecksum": {"algorithm": "MD5-of-0MD5-of-512CRC32C",
                                              "bytes": "00000200" + "0" * 16 + digest, "length": 28}})
            return 200
        raise RemoteError(400, "IllegalArgumentException", f"datanode cannot serve {method} {op}")


def _must_exist(path: Path, hdfs_path: str) -> None:
    if not path.exists():
        raise RemoteError(404, "FileNotFoundException", f"File does not exist: {hdfs_path}")


def _must_be_file(path: Path, hdfs_path: str) -> None:
    if not path.is_file():
        raise RemoteError(404, "FileNotFoundException", f"File {hdfs_path} does not exist.")
