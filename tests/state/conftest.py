"""Fixtures for state tests: a real HDFS (MiniDFSCluster) per test worker, and the WebHDFS fault server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hdfs import MiniHdfs
from tests.webhdfs_server import WebHdfsServer


@pytest.fixture(scope="session")
def mini_hdfs() -> Iterator[MiniHdfs]:
    """One MiniDFSCluster (NameNode + DataNode JVM) per test worker for the session: it takes seconds to start.
    Tests share it through fresh base paths (`hdfs_uri`)."""
    with MiniHdfs() as cluster:
        yield cluster


@pytest.fixture
def hdfs_uri(mini_hdfs: MiniHdfs) -> Iterator[str]:
    """`hdfs://127.0.0.1:<http port>/t-<uuid>`: a base path of its own in the shared cluster."""
    uri = mini_hdfs.fresh_uri()
    yield uri
    mini_hdfs.resume()  # a test that failed while the cluster was paused must not hang the next ones


@pytest.fixture
def webhdfs(tmp_path: Path) -> Iterator[WebHdfsServer]:
    """The hand-written WebHDFS server: only for faults a real NameNode cannot be made to show (5xx answers)."""
    with WebHdfsServer(tmp_path / "hdfs") as server:
        yield server
