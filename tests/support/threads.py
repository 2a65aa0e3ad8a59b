"""Running calls at the same time, for tests of races between clients."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stylus.runtime.runner import PipelineRunner


def start_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """`call` on a daemon thread of its own, started, and the list that gets what it raised (an exception on a
    plain thread is only printed: the test would go on as if the call had worked)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def run_concurrently(calls: Iterable[Callable[[], object]], timeout: float = 60.0) -> None:
    """Start every call on a thread of its own, wait for all, and raise the first error any of them raised."""
    started = [start_thread(call) for call in calls]
    for thread, _ in started:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread, _ in started), f"a concurrent call ran past {timeout:g}s"
    errors = [exc for _, raised in started for exc in raised]
    if errors:
        raise errors[0]


def join_runner(runner: PipelineRunner, thread: threading.Thread, timeout: float = 120.0) -> None:
    """Wait for a `PipelineRunner.run` thread (an `exit_when_idle` run) to end: stop it and fail if it is still
    running after `timeout`, and fail on any processor's error."""
    thread.join(timeout)
    if thread.is_alive():
        runner.stop.set()
        thread.join(30)
        raise AssertionError("the pipeline did not finish")
    assert not runner.errors, runner.errors
