"""Run `stylus` as a real subprocess (so SIGKILL/SIGTERM tests hit a real process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stylus_env(bootstrap: str | None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    if bootstrap:
        env["STYLUS_BOOTSTRAP_SERVERS"] = bootstrap
    env.update(extra)
    return env


def stylus_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "stylus", *args]


def run_stylus(*args: str, bootstrap: str | None = None, timeout: float = 120, cwd: str | Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(stylus_cmd(*args), env=env or stylus_env(bootstrap), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT)


def start_stylus(*args: str, bootstrap: str | None = None, cwd: str | Path | None = None,
                 log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    return subprocess.Popen(stylus_cmd(*args), env=stylus_env(bootstrap), cwd=cwd or ROOT, stdout=out,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL)


def wait_for_text(log: Path, text: str, count: int = 1, timeout: float = 60) -> None:
    """Wait until `text` appears `count` times in a process's log file."""
    import time

    deadline = time.monotonic() + timeout
    while (log.read_text(errors="replace") if log.exists() else "").count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.05)
