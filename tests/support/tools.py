"""Tests that need a Debian tool `make install` provides: skipped on a developer machine without it, but a
failure on CI (CI=true), where a missing tool means a missing install step, not a reason to skip."""

from __future__ import annotations

import os

import pytest


def needs(tool: str | None, what: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(tool is None and not os.environ.get("CI"),
                              reason=f"{what} is not installed (scripts/install-debs.sh installs it)")
