"""The test WebHDFS server speaks the protocol the real `hdfs` client expects, the way a real NameNode does.

The protocol tests run against both the hand-written server ("fake") and a real one (the shared MiniDFSCluster,
"minidfs"): whatever a backup test learns from the fake's answers, a real HDFS answers alike. Only the fault
injection (refuse with a status, hang) is the fake's own: the 5xx outage test needs it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from hdfs import HdfsError, InsecureClient

from tests.webhdfs_server import WebHdfsServer


def client(server: WebHdfsServer, timeout: float = 5.0) -> InsecureClient:
    return InsecureClient(server.url, user="tester", timeout=timeout)


@dataclass
class NameNode:
    """Where a protocol test talks to: its HTTP address and the directory its paths go under."""

    url: str
    base: str  # "" (the fake's root is the test's own) or a fresh directory of the shared cluster

    def client(self, timeout: float = 5.0) -> InsecureClient:
        return InsecureClient(self.url, user="tester", timeout=timeout)


@pytest.fixture(params=["fake", "minidfs"])
def namenode(request: pytest.FixtureRequest) -> Iterator[NameNode]:
    if request.param == "fake":
        yield NameNode(request.getfixturevalue("webhdfs").url, "")
    else:
        yield NameNode(request.getfixturevalue("mini_hdfs").url, urlsplit(request.getfixturevalue("hdfs_uri")).path)


def test_write_goes_through_a_307_redirect_to_the_datanode(webhdfs: WebHdfsServer) -> None:
    c = client(webhdfs)
    c.write("/a/b/file.bin", data=b"hello world")
    assert ("namenode", "PUT", "CREATE", 307) in webhdfs.requests
    assert ("datanode", "PUT", "CREATE", 201) in webhdfs.requests
    assert (webhdfs.root / "a/b/file.bin").read_bytes() == b"hello world"
    with c.read("/a/b/file.bin") as reader:
        assert reader.read() == b"hello world"
    assert ("namenode", "GET", "OPEN", 307) in webhdfs.requests
    assert ("datanode", "GET", "OPEN", 200) in webhdfs.requests


def test_data_moves_through_a_datanode_on_loopback(namenode: NameNode) -> None:
    """CREATE and OPEN are 307s to a datanode address the client can reach (127.0.0.1 on a MiniDFSCluster)."""
    path = f"{namenode.base}/r/file.bin"
    create = requests.put(f"{namenode.url}/webhdfs/v1{path}", params={"op": "CREATE", "user.name": "tester"},
                          allow_redirects=False, timeout=5)
    assert create.status_code == 307
    datanode = urlsplit(create.headers["Location"])
    assert datanode.hostname == "127.0.0.1" and datanode.port != urlsplit(namenode.url).port
    written = requests.put(create.headers["Location"], data=b"hello world", timeout=5)
    assert written.status_code == 201
    opened = requests.get(f"{namenode.url}/webhdfs/v1{path}", params={"op": "OPEN", "user.name": "tester"},
                          allow_redirects=False, timeout=5)
    assert opened.status_code == 307 and urlsplit(opened.headers["Location"]).hostname == "127.0.0.1"
    c = namenode.client()
    with c.read(path) as reader:
        assert reader.read() == b"hello world"
    with c.read(path, offset=6, length=3) as reader:
        assert reader.read() == b"wor"


def test_streamed_and_file_uploads_append_and_checksum(namenode: NameNode, tmp_path: Path) -> None:
    c, base = namenode.client(), namenode.base
    c.write(f"{base}/s.txt", data=(chunk for chunk in [b"ab", b"cd"]))  # chunked transfer encoding
    c.write(f"{base}/s.txt", data=b"ef", append=True)
    local = tmp_path / "local.bin"
    local.write_bytes(b"x" * 100_000)
    with local.open("rb") as fh:
        c.write(f"{base}/big.bin", data=fh)
    with c.read(f"{base}/s.txt") as reader:
        assert reader.read() == b"abcdef"
    assert c.status(f"{base}/big.bin")["length"] == 100_000
    checksum = c.checksum(f"{base}/big.bin")
    assert checksum["length"] == 28 and checksum["algorithm"].startswith("MD5")
    with pytest.raises(HdfsError) as info:
        c.write(f"{base}/s.txt", data=b"again")  # overwrite defaults to false
    assert info.value.exception == "FileAlreadyExistsException"
    c.write(f"{base}/s.txt", data=b"new", overwrite=True)
    with c.read(f"{base}/s.txt") as reader:
        assert reader.read() == b"new"


def test_metadata_operations(namenode: NameNode) -> None:
    c, d = namenode.client(), f"{namenode.base}/d"
    c.makedirs(f"{d}/e")
    c.write(f"{d}/one", data=b"1")
    c.write(f"{d}/two", data=b"22")
    assert c.list(d) == ["e", "one", "two"]
    statuses = dict(c.list(d, status=True))
    assert statuses["e"]["type"] == "DIRECTORY" and statuses["two"]["length"] == 2
    assert c.status(f"{d}/one")["type"] == "FILE"
    assert c.status(f"{namenode.base}/nope", strict=False) is None
    assert c.content(d)["fileCount"] == 2
    with pytest.raises(HdfsError, match="is not a directory"):
        c.list(f"{d}/one")
    c.rename(f"{d}/one", f"{d}/e")  # into an existing directory
    assert c.list(f"{d}/e") == ["one"]
    with pytest.raises(HdfsError, match="Unable to rename"):
        c.rename(f"{d}/two", f"{d}/e/one")  # the target exists and is a file
    with pytest.raises(HdfsError) as info:
        c.delete(d)
    assert info.value.exception == "PathIsNotEmptyDirectoryException"
    assert c.delete(d, recursive=True) is True
    assert c.delete(d) is False
    assert c.resolve("relative") == "/user/tester/relative"


def test_errors_are_java_remote_exceptions(namenode: NameNode) -> None:
    c, missing = namenode.client(), f"{namenode.base}/missing"
    with pytest.raises(HdfsError) as info:
        c.status(missing)
    assert info.value.exception == "FileNotFoundException"
    response = requests.get(f"{namenode.url}/webhdfs/v1{missing}?op=GETFILESTATUS", timeout=5)
    assert response.status_code == 404
    body = response.json()["RemoteException"]
    assert body["javaClassName"] == "java.io.FileNotFoundException" and "missing" in body["message"]
    bad = requests.get(f"{namenode.url}/webhdfs/v1/?op=NOSUCHOP", timeout=5)
    assert bad.status_code == 400 and bad.json()["RemoteException"]["exception"] == "IllegalArgumentException"


def test_fault_injection_refuse_and_hang(webhdfs: WebHdfsServer) -> None:
    c = client(webhdfs, timeout=0.5)
    c.write("/f", data=b"1")
    with webhdfs.refusing(503):
        with pytest.raises(HdfsError) as info:
            c.status("/f")
        assert info.value.exception == "RetriableException"
    webhdfs.refuse(500)
    with pytest.raises(HdfsError, match="injected failure"):
        c.write("/g", data=b"2")
    webhdfs.heal()
    assert c.status("/f")["length"] == 1
    webhdfs.hang(30)
    started = time.monotonic()
    with pytest.raises(requests.exceptions.Timeout):  # the client gives up; the server is still holding
        c.status("/f")
    assert time.monotonic() - started < 5
    webhdfs.heal()
    assert c.status("/f")["length"] == 1
