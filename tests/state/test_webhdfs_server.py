"""The test WebHDFS server speaks the protocol the real `hdfs` client expects."""

from __future__ import annotations

import time

import pytest
import requests
from hdfs import HdfsError, InsecureClient

from tests.webhdfs_server import WebHdfsServer


def client(server: WebHdfsServer, timeout: float = 5.0) -> InsecureClient:
    return InsecureClient(server.url, user="tester", timeout=timeout)


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
    with c.read("/a/b/file.bin", offset=6, length=3) as reader:
        assert reader.read() == b"wor"


def test_streamed_and_file_uploads_append_and_checksum(webhdfs: WebHdfsServer, tmp_path) -> None:
    c = client(webhdfs)
    c.write("/s.txt", data=(chunk for chunk in [b"ab", b"cd"]))  # chunked transfer encoding
    c.write("/s.txt", data=b"ef", append=True)
    assert ("datanode", "POST", "APPEND", 200) in webhdfs.requests
    local = tmp_path / "local.bin"
    local.write_bytes(b"x" * 100_000)
    with local.open("rb") as fh:
        c.write("/big.bin", data=fh)
    with c.read("/s.txt") as reader:
        assert reader.read() == b"abcdef"
    assert c.status("/big.bin")["length"] == 100_000
    checksum = c.checksum("/big.bin")
    assert checksum["length"] == 28 and checksum["algorithm"].startswith("MD5")
    with pytest.raises(HdfsError) as info:
        c.write("/s.txt", data=b"again")  # overwrite defaults to false
    assert info.value.exception == "FileAlreadyExistsException"
    c.write("/s.txt", data=b"new", overwrite=True)
    with c.read("/s.txt") as reader:
        assert reader.read() == b"new"


def test_metadata_operations(webhdfs: WebHdfsServer) -> None:
    c = client(webhdfs)
    c.makedirs("/d/e")
    c.write("/d/one", data=b"1")
    c.write("/d/two", data=b"22")
    assert c.list("/d") == ["e", "one", "two"]
    statuses = dict(c.list("/d", status=True))
    assert statuses["e"]["type"] == "DIRECTORY" and statuses["two"]["length"] == 2
    assert c.status("/d/one")["type"] == "FILE"
    assert c.status("/nope", strict=False) is None
    assert c.content("/d")["fileCount"] == 2
    with pytest.raises(HdfsError, match="is not a directory"):
        c.list("/d/one")
    c.rename("/d/one", "/d/e")  # into an existing directory
    assert c.list("/d/e") == ["one"]
    with pytest.raises(HdfsError, match="Unable to rename"):
        c.rename("/d/two", "/d/e/one")  # the target exists and is a file
    with pytest.raises(HdfsError) as info:
        c.delete("/d")
    assert info.value.exception == "PathIsNotEmptyDirectoryException"
    assert c.delete("/d", recursive=True) is True
    assert c.delete("/d") is False
    assert c.resolve("relative") == "/user/tester/relative"


def test_errors_are_java_remote_exceptions(webhdfs: WebHdfsServer) -> None:
    c = client(webhdfs)
    with pytest.raises(HdfsError) as info:
        c.status("/missing")
    assert info.value.exception == "FileNotFoundException"
    response = requests.get(f"{webhdfs.url}/webhdfs/v1/missing?op=GETFILESTATUS", timeout=5)
    assert response.status_code == 404
    body = response.json()["RemoteException"]
    assert body["javaClassName"] == "java.io.FileNotFoundException" and "missing" in body["message"]
    bad = requests.get(f"{webhdfs.url}/webhdfs/v1/?op=NOSUCHOP", timeout=5)
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
