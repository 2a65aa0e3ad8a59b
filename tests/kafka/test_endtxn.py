"""EndTxn turns: exclusive across threads and processes of one machine, and never blocking for long."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import time
from pathlib import Path

from stylus.kafka.endtxn import EndTxnTurns, turn_file
from tests.support.threads import run_concurrently


def _hold_turns(bootstrap: str, spans: list[tuple[float, float]], rounds: int) -> None:
    turns = EndTxnTurns(bootstrap)
    for _ in range(rounds):
        with turns:
            started = time.monotonic()
            time.sleep(0.003)  # an EndTxn's round trip
            spans.append((started, time.monotonic()))
    turns.close()


def _process_turns(bootstrap: str, out: Path, rounds: int) -> None:
    spans: list[tuple[float, float]] = []
    _hold_turns(bootstrap, spans, rounds)
    out.write_text("\n".join(f"{a} {b}" for a, b in spans))


def test_turns_never_overlap_across_threads_and_processes(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{int(time.time() * 1000) % 60000}-{tmp_path.name}"
    outs = [tmp_path / f"p{i}.txt" for i in range(2)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_turns, args=(bootstrap, out, 30)) for out in outs]
    for proc in procs:
        proc.start()
    local: list[tuple[float, float]] = []
    run_concurrently([functools.partial(_hold_turns, bootstrap, local, 30) for _ in range(2)])
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    spans = sorted(local + [tuple(map(float, line.split())) for out in outs  # type: ignore[misc]
                            for line in out.read_text().splitlines()])
    assert len(spans) == 4 * 30
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert overlaps == []  # CLOCK_MONOTONIC is shared by the processes of one machine
    turn_file(bootstrap).unlink()


def test_a_turn_held_too_long_elsewhere_is_not_waited_for(tmp_path: Path) -> None:
    bootstrap = f"held-{tmp_path.name}"
    holder, waiter = EndTxnTurns(bootstrap), EndTxnTurns(bootstrap, wait=0.2)
    with holder:  # another process frozen inside its EndTxn (flock locks of separate opens exclude each other)
        started = time.monotonic()
        with waiter:
            waited = time.monotonic() - started
    assert 0.2 <= waited < 1.0
    with waiter:  # and once the holder is done, the turn is taken at once
        pass
    holder.close()
    waiter.close()
    turn_file(bootstrap).unlink()
