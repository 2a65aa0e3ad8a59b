"""`stylus serve` on the real broker: two (then three) instances, every key answered correctly from either,
forwarding to the partition's owner, a tombstone giving 404, and 503 with Retry-After while the group
rebalances, never a wrong value."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import PipelineFactory
from tests.support.chaos import wait_until
from tests.support.cli import stylus_cmd, stylus_env
from tests.support.net import closed_port
from tests.tables.helpers import FAST_GROUP, produce_rows, rows

KEYS = 200


def _doc() -> dict[str, Any]:
    return {
        "kafka": FAST_GROUP,
        "topics": {"events": {"partitions": 4}, "dims": {"partitions": 4}, "flags": {"partitions": 1}},
        "tables": {"dims": {"topic": "dims", "placement": "partitioned"},
                   "flags": {"topic": "flags", "placement": "global"}},
        "processors": {"p": {"class": "tests.tables.apps:Enricher", "inputs": ["events"],
                             "semantics": {"output": "at_least_once"}}},
    }


class Server:
    """One `stylus serve` process on a port of its own, with its own table directory (its own machine)."""

    def __init__(self, path: Path, bootstrap: str, tmp: Path, name: str) -> None:
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"serve-{name}.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                stylus_cmd("serve", str(path), "--port", str(self.port), "--dir", str(tmp / f"tables-{name}")),
                env=stylus_env(bootstrap), stdout=out, stderr=subprocess.STDOUT)
        self.session = requests.Session()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def holding(self) -> bool:
        return "serve: holding dims" in self.text()

    def get(self, table: str, key: str) -> requests.Response:
        return self.session.get(f"{self.url}/tables/{table}/{key}", timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        server.stop()


def _established(pid: int, port: int) -> int:
    """How many established TCP connections process `pid` has to `port` (from /proc: no tool needed)."""
    fds = Path(f"/proc/{pid}/fd")
    inodes = {link[len("socket:["):-1] for fd in fds.iterdir() if (link := os.readlink(fd)).startswith("socket:[")}
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port, state, inode = int(fields[2].rpartition(":")[2], 16), fields[3], fields[9]
            count += remote_port == port and state == "01" and inode in inodes  # 01: ESTABLISHED
    return count


def _all_correct(server: Server, table: dict[str, Any]) -> bool:
    for key, value in table.items():
        answer = server.get("dims", key)
        if answer.status_code != 200 or answer.json() != value:
            return False
    return True


def test_two_instances_answer_every_key_and_a_tombstone_makes_it_404(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, servers: list[Server]) -> None:
    path, pipeline = pipeline_factory(_doc())
    table = rows(KEYS)
    produce_rows(bootstrap, pipeline.tables["dims"].topic, table)
    produce_rows(bootstrap, pipeline.tables["flags"].topic, {"on": {"flag": True}})
    a, b = Server(path, bootstrap, tmp_path, "a"), Server(path, bootstrap, tmp_path, "b")
    servers += [a, b]
    wait_until(lambda: a.holding() and b.holding() and _all_correct(a, table) and _all_correct(b, table), 90,
               "both instances answering every key", explain=lambda: a.text()[-2000:] + b.text()[-2000:])
    served_by = {server.url: {server.get("dims", k).headers["X-Stylus-Served-By"] for k in table}
                 for server in (a, b)}
    assert all(len(owners) == 2 for owners in served_by.values()), served_by  # each forwarded to the other
    # each asked by one kept-alive client connection: its forwards to the other shared one connection too
    assert _established(a.proc.pid, b.port) == 1 and _established(b.proc.pid, a.port) == 1
    assert a.get("flags", "on").json() == {"flag": True} == b.get("flags", "on").json()  # global: both hold it
    for server in (a, b):
        missing = server.get("dims", "nope")
        assert missing.status_code == 404 and missing.json() == {"error": "no such key"}
        assert server.get("nope", "k1").status_code == 404
        assert server.session.get(f"{server.url}/elsewhere", timeout=10).status_code == 404

    produce_rows(bootstrap, pipeline.tables["dims"].topic, {"k3": None, "k42": None})
    wait_until(lambda: all(s.get("dims", k).status_code == 404 for s in (a, b) for k in ("k3", "k42")), 30,
               "the tombstones applied")
    kept = {k: v for k, v in table.items() if k not in ("k3", "k42")}
    assert _all_correct(a, kept) and _all_correct(b, kept)


def test_a_rebalance_answers_503_with_retry_after_and_never_a_wrong_value(
        bootstrap: str, pipeline_factory: PipelineFactory, tmp_path: Path, servers: list[Server]) -> None:
    path, pipeline = pipeline_factory(_doc())
    table = rows(50_000)  # a catch-up that takes a moment: the partitions' new owner is not ready at once
    produce_rows(bootstrap, pipeline.tables["dims"].topic, table)
    a, b = Server(path, bootstrap, tmp_path, "a"), Server(path, bootstrap, tmp_path, "b")
    servers += [a, b]
    probe = [f"k{n}" for n in range(0, 50_000, 997)]
    sample = {k: table[k] for k in probe}
    wait_until(lambda: a.holding() and b.holding() and _all_correct(a, sample), 120, "two instances serving",
               explain=lambda: a.text()[-2000:] + b.text()[-2000:])
    c = Server(path, bootstrap, tmp_path, "c")  # joins: the group rebalances, partitions move
    servers.append(c)
    seen: dict[int, int] = {}
    wrong: list[str] = []
    retry_after: set[str | None] = set()

    def settled_with_three() -> bool:
        for key in probe:
            answer = a.get("dims", key)
            seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
            if answer.status_code == 200:
                if answer.json() != table[key]:
                    wrong.append(f"{key}: {answer.text}")
            elif answer.status_code == 503:
                retry_after.add(answer.headers.get("Retry-After"))
            else:
                wrong.append(f"{key}: {answer.status_code} {answer.text}")
        return c.holding() and "serve: holding" in c.text() and seen.get(503, 0) > 0 and _all_correct(a, sample)

    with contextlib.suppress(AssertionError):
        wait_until(settled_with_three, 120, "the third instance serving", interval=0.0)
    print(f"\nanswers of A while C joined: {seen}")
    assert not wrong, wrong[:10]
    assert seen.get(503, 0) > 0, f"no 503 seen during the rebalance: {seen}\n{c.text()[-2000:]}"
    assert retry_after == {"1"}
    assert _all_correct(a, sample) and _all_correct(c, sample) and _all_correct(b, sample)
    owners = {a.get("dims", k).headers["X-Stylus-Served-By"] for k in probe}
    assert len(owners) == 3, owners  # the partitions are spread over all three now
