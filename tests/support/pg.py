"""A fresh PostgreSQL database on the machine's server (created, then dropped with everything in it)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psycopg

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def fresh_database(prefix: str = "stylus_test") -> Iterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
