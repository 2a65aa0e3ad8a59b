"""The driver's own pytest plugin, as a project that installs stylus gets it through the `pytest11` entry point."""

from stylus.testing.fixtures import stylus_driver

__all__ = ["stylus_driver"]
