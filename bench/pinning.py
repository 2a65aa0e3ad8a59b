"""Cores of their own for a benchmark's measured side and its broker (`--pin`).

On a machine where the broker runs beside the processor, the two take turns on the same cores, and a faster side
makes the broker busier: ratios measured so drift with the host's load and are compressed at high rates. Pinned,
the measured side gets one core for its thread and its Kafka client's threads (a processor container of one CPU)
and the broker the others, as in a deployment where the broker runs elsewhere.
"""

from __future__ import annotations

import os
from contextlib import suppress


def split_cores() -> tuple[set[int], set[int]]:
    """This process's CPUs as (the measured side's one, the broker's rest). Refused below two CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"--pin needs two CPUs, one for the measured side and one for the broker; this process may "
                         f"use {len(cpus)} ({cpus}): run without --pin")
    return {cpus[-1]}, set(cpus[:-1])


def pin_process(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` onto `cpus` (threads it starts later inherit their creator's mask). Threads
    are listed again until a pass finds none new, so one started during a pass is not missed."""
    done: set[int] = set()
    while True:
        threads = {int(tid) for tid in os.listdir(f"/proc/{pid}/task")} - done
        if not threads:
            return
        for tid in threads:
            with suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, cpus)
        done |= threads


def thread_cpus(pid: int) -> dict[int, set[int]]:
    """Each live thread of `pid` and the CPUs it may run on."""
    found: dict[int, set[int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with suppress(ProcessLookupError, FileNotFoundError):
            found[int(tid)] = os.sched_getaffinity(int(tid))
    return found
