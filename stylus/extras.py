"""Optional dependencies: `pip install stylus` brings the core (Kafka client, RocksDB, pydantic, YAML,
metrics), enough to validate and run pipelines with local state. The rest are extras, named in
pyproject.toml's `[project.optional-dependencies]`; code that needs one calls `require(extra, what)` before
importing it, so a missing package is one line naming the extra to install, not an ImportError traceback.
"""

from __future__ import annotations

import importlib.util

import click

#: extra -> (what it provides, in words; the top-level modules it installs)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "spark": ("Spark", ("pyspark", "pyarrow", "pandas")),
    "archive": ("pyarrow (Parquet)", ("pyarrow",)),
    "batch": ("pyarrow, NumPy and Polars (the columnar batch path)", ("pyarrow", "numpy", "polars")),
    "hdfs": ("the HDFS client", ("hdfs",)),
    "postgres": ("PostgreSQL (psycopg)", ("psycopg",)),
    "grafana": ("grafanalib", ("grafanalib",)),
    "demo": ("numpy", ("numpy",)),
    "plot": ("matplotlib", ("matplotlib",)),
    "sql": ("sqlglot", ("sqlglot",)),
    "serve": ("uvicorn, httptools and uvloop (its HTTP server)", ("uvicorn", "httptools", "uvloop")),
}


class MissingExtra(click.ClickException, ImportError):
    """An optional dependency is not installed. A ClickException, so a command prints the message alone and
    exits 1; an ImportError, so code that already falls back on a missing import keeps doing so."""

    def __init__(self, extra: str, what: str) -> None:
        self.extra, self.what = extra, what
        self.needs = f"{what} needs {EXTRAS[extra][0]}"
        self.fix = f"pip install 'stylus[{extra}]'"
        super().__init__(f"{self.needs}: {self.fix}")


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (empty when the extra is installed)."""
    return [m for m in EXTRAS[extra][1] if importlib.util.find_spec(m) is None]


def extra_for(module: str | None) -> str | None:
    """The extra that installs the top-level package of `module` (a ModuleNotFoundError's `name`), if any."""
    top = (module or "").partition(".")[0]
    return next((extra for extra, (_, modules) in EXTRAS.items() if top in modules), None)


def installed(extra: str) -> bool:
    return not missing(extra)


def require(extra: str, what: str) -> None:
    """Raise MissingExtra unless every module of `extra` is importable; `what` names the command or feature
    that needs it, e.g. `require("spark", "stylus backfill")`."""
    if missing(extra):
        raise MissingExtra(extra, what)
