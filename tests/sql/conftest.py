"""A Spark session for the one backfill test here (as tests/backfill/conftest.py makes one there)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from stylus.backfill.session import spark_session

    session = spark_session("local[2]", "stylus-sql-backfill-tests", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _batch_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """`STYLUS_TEST_SQL_BATCH=1`: `batch: auto` takes the batch path for every kind of stage that has one, so the
    SQL tests run under the batch compilation (in this process; `stylus run` subprocesses keep the default)."""
    if os.environ.get("STYLUS_TEST_SQL_BATCH") == "1":
        monkeypatch.setattr("stylus.sql.batching.AUTO", frozenset({"project", "filter", "window"}))
