"""Human durations (`500ms`, `2s`, `5m`, `1h`, `1d`) as float seconds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


def parse_duration(value: object) -> float:
    """Seconds from a duration string, or from a bare number taken as seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a string like '500ms', '2s', '5m', '1h' or '1d'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match:
            return float(match.group(1)) * _UNITS[match.group(2)]
    raise ValueError(f"{value!r} is not a duration; write it like '500ms', '2s', '5m', '1h' or '1d'")


def format_duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"


Duration = Annotated[float, BeforeValidator(parse_duration)]
