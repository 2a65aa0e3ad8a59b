"""The backfill tests' Spark session, for the tests that check a stream run stage by stage."""

from tests.backfill.conftest import spark

__all__ = ["spark"]
