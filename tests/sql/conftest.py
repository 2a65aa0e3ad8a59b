"""A Spark session for the one backfill test here (as tests/backfill/conftest.py makes one there)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from stylus.backfill.session import spark_session

    session = spark_session("local[2]", "stylus-sql-backfill-tests", conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
