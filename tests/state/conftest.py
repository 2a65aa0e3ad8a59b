"""Fixtures for state tests: a WebHDFS-protocol server over a temp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.webhdfs_server import WebHdfsServer


@pytest.fixture
def webhdfs(tmp_path: Path) -> Iterator[WebHdfsServer]:
    with WebHdfsServer(tmp_path / "hdfs") as server:
        yield server
