"""docs/tutorial.md, run as written: its files written to an empty directory, its commands run there in order.

The conventions the tutorial follows:

- a fenced block whose info string names a file (```python file=totals.py```) is written to that file;
- in a ```console block, a line starting with `$ ` is a command, run by bash in the project directory; the
  lines after it, up to the next command, are its output as shown: each must match a line of the command's
  standard output (whitespace collapsed, in any order, `...` matching anything); a command must exit 0;
- a command ending in ` &` runs in the background: it is ready once it prints its first shown output line
  (and, when that is a URL, the URL answers), and is stopped when the test ends;
- `stylus broker` is not run: the suite's broker (the `bootstrap` fixture) stands in for it, and
  `export STYLUS_BOOTSTRAP_SERVERS=...` points the following commands at that broker;
- the status page's port 8080 becomes a free port.

A few outputs are checked beyond that (the `CHECKS` below, each on the first command that starts with its
prefix; each must find one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from stylus.config import load_pipeline
from stylus.kafka.admin import delete_topics, pipeline_topics
from tests.support.tools import needs

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
FIRST_TOTALS = {"alice": [5, 15], "bob": [3, 7], "carol": [7]}  # from purchases.txt
ALL_TOTALS = {**FIRST_TOTALS, "alice": [5, 15, 16]}  # and the one purchase put in after the first run


@dataclass
class Command:
    line: str
    shown: list[str] = field(default_factory=list)


@dataclass
class File:
    name: str
    text: str


def steps(markdown: str) -> list[File | Command]:
    out: list[File | Command] = []
    for info, body in FENCE.findall(markdown):
        words = info.split()
        names = [w.removeprefix("file=") for w in words if w.startswith("file=")]
        if names:
            out.append(File(names[0], body))
        elif words[:1] == ["console"]:
            for line in body.splitlines():
                if line.startswith("$ "):
                    out.append(Command(line[2:].strip()))
                elif line.strip() and isinstance(out[-1], Command):
                    out[-1].shown.append(line)
    return out


def _squash(line: str) -> str:
    return " ".join(line.split())


def assert_shown(command: Command, stdout: str) -> None:
    lines = [_squash(line) for line in stdout.splitlines()]
    for shown in command.shown:
        if _squash(shown) == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in _squash(shown).split("...")))
        assert any(pattern.fullmatch(line) for line in lines), (
            f"`{command.line}` did not print a line like {shown!r}; it printed:\n{stdout}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except OSError:
        return 0, ""


# -- the outputs that matter, by the start of the command that prints them -----------------------------------

def check_pytest(project: Path, stdout: str) -> None:
    assert re.search(r"\b2 passed\b", stdout) and "failed" not in stdout, stdout


def check_run(project: Path, stdout: str) -> None:
    assert "running-total: processed 5 records" in stdout, stdout


def check_totals(project: Path, stdout: str) -> None:
    totals: dict[str, list[int]] = {}
    for line in stdout.splitlines():
        key, value = line.split(" ", 1)
        totals.setdefault(key, []).append(json.loads(value)["total"])
    assert totals == FIRST_TOTALS, stdout


def check_lag(project: Path, stdout: str) -> None:
    total = next(line.split() for line in stdout.splitlines() if "(total)" in line)
    assert total[-2:] == ["0", "0.0"], stdout


def check_backfill(project: Path, stdout: str) -> None:
    assert "running-total: 6 records" in stdout, stdout
    rows = pq.read_table(project / "backfill").to_pylist()
    totals: dict[str, list[int]] = {}
    for row in rows:
        totals.setdefault(row["key"], []).append(json.loads(row["value"])["total"])
    assert totals == ALL_TOTALS, rows


CHECKS: dict[str, Callable[[Path, str], None]] = {
    "pytest ": check_pytest,
    "stylus run ": check_run,
    "kcat -C ": check_totals,
    "stylus lag ": check_lag,
    "stylus backfill ": check_backfill,
}


def status_page_answers(url: str) -> None:
    """The page answers 200 with the pipeline's name, and its JSON has had its first sample of Kafka."""
    wait_until(lambda: http_get(url)[0] == 200, f"{url} to answer")
    status, page = http_get(url)
    assert status == 200 and "shop" in page, page[:2000]

    def sampled() -> bool:
        code, body = http_get(url + "api/status")
        return code == 200 and json.loads(body).get("ready") and "running-total" in json.loads(body)["processors"]

    wait_until(sampled, "the status page's first sample")


def start_in_background(command: Command, log: Path, project: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Started in its own process group (stopped with it at the end); ready once it prints its first shown line."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", command.line.rstrip("&").strip()], cwd=project, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    first = command.shown[0].strip()
    try:
        wait_until(lambda: first in log.read_text() or proc.poll() is not None, f"`{command.line}` to print {first}")
        assert proc.poll() is None, f"`{command.line}` exited:\n{log.read_text()}"
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group: bash and what it started
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@needs(shutil.which("kcat"), "kcat (Debian package)")
def test_the_tutorial_runs_as_written(bootstrap: str, tmp_path: Path) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    port = str(free_port())
    env = {k: v for k, v in os.environ.items()
           if k not in ("STYLUS_BOOTSTRAP_SERVERS", "STYLUS_PROFILE", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # .venv/bin
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # as `make` exports it
    env["PYTEST_ADDOPTS"] = "-p no:cacheprovider"

    background: list[subprocess.Popen[bytes]] = []
    checked: set[str] = set()
    ui_seen = False
    try:
        for step in steps(TUTORIAL.read_text()):
            if isinstance(step, File):
                (project / step.name).parent.mkdir(parents=True, exist_ok=True)
                (project / step.name).write_text(step.text)
                continue
            line = step.line.replace("8080", port)
            step = Command(line, [s.replace("8080", port) for s in step.shown])
            if line.startswith("stylus broker"):
                continue  # the suite's broker stands in
            if line.startswith("export "):
                name, _, value = shlex.split(line)[1].partition("=")
                env[name] = bootstrap if name == "STYLUS_BOOTSTRAP_SERVERS" else value
                continue
            if line.endswith("&"):
                background.append(start_in_background(step, project / f".background-{len(background)}.log",
                                                      project, env))
                if line.startswith("stylus ui "):
                    status_page_answers(step.shown[0].strip())
                    ui_seen = True
                continue
            done = subprocess.run(["bash", "-c", line], cwd=project, env=env, capture_output=True, text=True,
                                  timeout=240)
            assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stdout}\n{done.stderr[-5000:]}"
            assert_shown(step, done.stdout)
            for prefix, check in CHECKS.items():
                if line.startswith(prefix) and prefix not in checked:
                    check(project, done.stdout)
                    checked.add(prefix)
        assert checked == set(CHECKS), f"the tutorial has no command starting with {set(CHECKS) - checked}"
        assert ui_seen, "the tutorial does not start `stylus ui`"
    finally:
        for proc in background:
            stop(proc)
        if (project / "pipeline.yaml").exists():
            delete_topics(bootstrap, list(pipeline_topics(load_pipeline(project / "pipeline.yaml"))))
