"""A fresh PostgreSQL database per test (created and dropped here), on the machine's server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.pg import fresh_database


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    with fresh_database() as dsn:
        yield dsn
