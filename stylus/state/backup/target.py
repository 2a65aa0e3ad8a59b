"""Where backups go: a small blob-store interface over a local directory (file://) or WebHDFS (hdfs://).

Paths are relative to the target's root and use "/". Writes are atomic for readers: a file is written
under a temporary name and renamed into place, so a reader never sees half a blob or half a manifest.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import urlsplit

CHUNK = 1 << 20


class BackupTargetError(RuntimeError):
    """The target could not be reached or refused an operation."""


class BackupTarget(Protocol):
    uri: str

    def put_file(self, rel: str, local: Path) -> None: ...
    def put_bytes(self, rel: str, data: bytes) -> None: ...
    def open_read(self, rel: str) -> Iterator[bytes]: ...
    def get_bytes(self, rel: str) -> bytes: ...
    def list(self, rel_dir: str) -> dict[str, int]: ...
    def delete(self, rel: str) -> None: ...


class LocalTarget:
    """`file:///path`: the embedded default; also what a mounted network file system looks like."""

    def __init__(self, uri: str, root: str | Path) -> None:
        self.uri = uri
        self.root = Path(root)

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def put_file(self, rel: str, local: Path) -> None:
        dest = self._path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(local, tmp)
        os.replace(tmp, dest)

    def put_bytes(self, rel: str, data: bytes) -> None:
        dest = self._path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)

    def open_read(self, rel: str) -> Iterator[bytes]:
        try:
            fh = self._path(rel).open("rb")
        except FileNotFoundError as exc:
            raise BackupTargetError(f"{self.uri}/{rel}: missing") from exc
        with fh:
            while chunk := fh.read(CHUNK):
                yield chunk

    def get_bytes(self, rel: str) -> bytes:
        return b"".join(self.open_read(rel))

    def list(self, rel_dir: str) -> dict[str, int]:
        """File name -> size of the files directly in `rel_dir` (empty when it does not exist)."""
        path = self._path(rel_dir)
        if not path.is_dir():
            return {}
        return {p.name: p.stat().st_size for p in path.iterdir() if p.is_file() and not p.name.startswith(".")}

    def delete(self, rel: str) -> None:
        self._path(rel).unlink(missing_ok=True)


class WebHdfsTarget:
    """`hdfs://namenode:port/path` (port = the namenode's HTTP port, 9870 by default) through WebHDFS."""

    def __init__(self, uri: str, url: str, root: str, *, timeout: float = 60.0, user: str | None = None) -> None:
        from stylus.extras import require

        require("hdfs", f"the backup target {uri}")
        from hdfs import InsecureClient

        self.uri = uri
        self.root = root.rstrip("/") or "/"
        quiet = logging.getLogger("hdfs")
        if quiet.level == logging.NOTSET:  # the client logs every request at INFO
            quiet.setLevel(logging.WARNING)
        self.client = InsecureClient(url, user=user or os.environ.get("HADOOP_USER_NAME") or "stylus",
                                     timeout=timeout)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root != "/" else f"/{rel}"

    def _call(self, what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from hdfs.util import HdfsError
        from requests import RequestException

        try:
            return func(*args, **kwargs)
        except (HdfsError, RequestException) as exc:
            raise BackupTargetError(f"{self.uri}: {what}: {type(exc).__name__}: {exc}") from exc

    def _put(self, rel: str, data: bytes | BinaryIO) -> None:
        dest = self._path(rel)
        tmp = f"{dest.rsplit('/', 1)[0]}/.{dest.rsplit('/', 1)[1]}.{uuid.uuid4().hex[:8]}.tmp"
        self._call(f"write {tmp}", self.client.write, tmp, data=data, overwrite=True)
        try:
            self._call(f"rename {tmp}", self.client.rename, tmp, dest)
        except BackupTargetError:
            # HDFS rename refuses an existing target. Blobs are content-addressed (same bytes) and manifests
            # have unique ids, so replacing what is there loses nothing.
            self._call(f"delete {dest}", self.client.delete, dest)
            self._call(f"rename {tmp}", self.client.rename, tmp, dest)

    def put_file(self, rel: str, local: Path) -> None:
        with local.open("rb") as fh:
            self._put(rel, fh)

    def put_bytes(self, rel: str, data: bytes) -> None:
        self._put(rel, data)

    def open_read(self, rel: str) -> Iterator[bytes]:
        from hdfs.util import HdfsError
        from requests import RequestException

        try:
            with self.client.read(self._path(rel), chunk_size=CHUNK) as chunks:
                yield from chunks
        except (HdfsError, RequestException) as exc:
            raise BackupTargetError(f"{self.uri}/{rel}: read: {type(exc).__name__}: {exc}") from exc

    def get_bytes(self, rel: str) -> bytes:
        return b"".join(self.open_read(rel))

    def list(self, rel_dir: str) -> dict[str, int]:
        path = self._path(rel_dir)
        if self._call(f"status {path}", self.client.status, path, strict=False) is None:
            return {}
        entries = self._call(f"list {path}", self.client.list, path, status=True)
        return {name: int(st["length"]) for name, st in entries
                if st["type"] == "FILE" and not name.startswith(".")}

    def delete(self, rel: str) -> None:
        self._call(f"delete {rel}", self.client.delete, self._path(rel))


def target_for(uri: str, *, timeout: float = 60.0) -> BackupTarget:
    """`file:///abs/path`, `hdfs://host:port/path` or `webhdfs://host:port/path`."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"backup uri {uri!r}: file:// URIs take an absolute path (file:///path)")
        return LocalTarget(uri, parts.path)
    if parts.scheme in ("hdfs", "webhdfs"):
        if not parts.hostname:
            raise ValueError(f"backup uri {uri!r}: needs a namenode host (hdfs://namenode:9870/path)")
        url = f"http://{parts.hostname}:{parts.port or 9870}"
        return WebHdfsTarget(uri, url, parts.path or "/", timeout=timeout)
    raise ValueError(f"backup uri {uri!r}: the scheme must be file://, hdfs:// or webhdfs://")
