"""The worker's garbage-collector settings (stylus/runtime/gctune.py), each case in a fresh interpreter:
they are process-wide, and the test process's own settings must not decide the outcome."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, sys
if len(sys.argv) > 1:
    gc.set_threshold(int(sys.argv[1]), 10, 10)
from stylus.runtime.gctune import tune_for_streaming
tune_for_streaming()
tune_for_streaming()  # idempotent
print(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def probe(env: dict[str, str], *args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", **env})
    return json.loads(done.stdout)


@pytest.mark.parametrize(("env", "args", "threshold", "frozen"), [
    ({}, (), [50_000, 10, 10], True),  # the default: raised, start-up objects frozen
    ({"STYLUS_GC_GEN0": "20000"}, (), [20_000, 10, 10], True),
    ({"STYLUS_GC_GEN0": "0"}, (), [700, 10, 10], False),  # opted out: CPython's own settings
    ({"STYLUS_GC_GEN0": "lots"}, (), [700, 10, 10], False),  # unreadable: left alone, with a warning
    ({}, ("1000",), [1000, 10, 10], False),  # chosen by the application: kept
])
def test_threshold_and_freeze(env: dict[str, str], args: tuple[str, ...], threshold: list[int], frozen: bool) -> None:
    got = probe(env, *args)
    assert got["threshold"] == threshold
    assert (got["frozen"] > 0) is frozen  # type: ignore[operator]
