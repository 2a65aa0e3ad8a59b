"""`${VAR}` and `${VAR:-default}` expansion, applied to YAML text before parsing."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingVariable(ValueError):
    def __init__(self, name: str, line: int) -> None:
        self.name = name
        self.line = line
        super().__init__(f"environment variable {name} is not set")


def expand_env(text: str, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise MissingVariable(name, text.count("\n", 0, match.start()) + 1)

    return _VAR.sub(substitute, text)
