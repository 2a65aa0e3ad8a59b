"""Testing processors without a broker: `TestDriver` runs one processor, or a whole pipeline from its YAML,
on the production `Engine` over in-memory topics and in-memory state (docs/testing.md)."""

from stylus.testing.driver import TestDriver
from stylus.testing.records import Record

__all__ = ["Record", "TestDriver"]
