"""User functions named by `CREATE FUNCTION name AS 'module:callable'`: imported when the app is loaded (so a
typo is a `stylus validate` error, not a worker's crash) and again by each stage when it starts.

A class with `zero`, `add` and `merge` (the window Aggregate interface, `result` optional) is a UDAF and is
instantiated once per stage with no arguments; any other callable is a scalar UDF called with the argument
values (NULLs included)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stylus.sql.errors import fail

if TYPE_CHECKING:  # the parser (sqlglot) is needed to load an app, not to run its stages
    from stylus.sql.dialect import FunctionDef

_AGGREGATE_METHODS = ("zero", "add", "merge")


@dataclass(frozen=True)
class Function:
    """A CREATE FUNCTION, imported: `kind` is `udf` (a callable) or `udaf` (zero/add/merge)."""

    name: str
    path: str
    kind: str


def import_callable(path: str) -> Any:
    """`module:callable`, imported like processor classes are (the current directory is on the path)."""
    module_name, _, attr = path.partition(":")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = importlib.import_module(module_name)
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def kind_of(target: Any) -> str | None:
    if isinstance(target, type) and all(callable(getattr(target, m, None)) for m in _AGGREGATE_METHODS):
        return "udaf"
    return "udf" if callable(target) else None


def resolve(functions: dict[str, FunctionDef], reserved: Collection[str]) -> dict[str, Function]:
    """Import every CREATE FUNCTION; the first that fails is the app's error. `reserved`: built-in names."""
    resolved: dict[str, Function] = {}
    for name, definition in functions.items():
        if name.lower() in reserved:
            raise fail(f"`{name}` is a built-in function", "give your function another name", definition.offset)
        try:
            target = import_callable(definition.path)
        except Exception as exc:  # ImportError, AttributeError, or an error raised by the module itself
            raise fail(f"cannot import `{definition.path}`: {type(exc).__name__}: {exc}",
                       "give the path as 'package.module:callable', importable from the current directory or "
                       "the installed packages", definition.path_offset) from exc
        kind = kind_of(target)
        if kind is None:
            raise fail(f"`{definition.path}` is neither a function nor an aggregate class",
                       "point at a function (a UDF) or a class with zero, add and merge (a UDAF)",
                       definition.path_offset)
        resolved[name] = Function(name, definition.path, kind)
    return resolved


def load(functions: dict[str, dict[str, str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stage's plan `functions` ({name: {path, kind}}) as (UDF callables, UDAF instances) by name."""
    udfs: dict[str, Any] = {}
    udafs: dict[str, Any] = {}
    for name, spec in functions.items():
        target = import_callable(spec["path"])
        if spec["kind"] == "udaf":
            udafs[name] = target()
        else:
            udfs[name] = target
    return udfs, udafs
