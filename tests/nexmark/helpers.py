"""What the Nexmark tests share: where the apps are, and a driver for one implementation of a query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stylus.testing import TestDriver

NEXMARK = Path(__file__).resolve().parents[2] / "pipelines" / "nexmark"

#: implementation -> (its pipeline; query -> (its processors, upstream first, or a SQL app's YAML name; its output))
Implementations = dict[str, tuple[Path, dict[str, tuple[list[str], str]]]]


def nexmark_driver(implementations: Implementations, impl: str, query: str, **options: Any) -> tuple[TestDriver, str]:
    """A driver running `impl`'s processors of `query` (a SQL app: all of its stages), and the query's output."""
    pipeline, queries = implementations[impl]
    processors, output = queries[query]
    return TestDriver(pipeline, processors=processors, **options), output
