"""The deadline around client calls that can hang inside librdkafka."""

from __future__ import annotations

import threading
import time

import pytest

from stylus.runtime.bounded import CallStuck, call_with_deadline


def test_a_call_that_returns_gives_its_result_or_its_error() -> None:
    assert call_with_deadline(lambda: 42, 1.0, "answer") == 42

    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        call_with_deadline(fails, 1.0, "failing")


def test_a_call_that_hangs_is_given_up_at_the_deadline() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(CallStuck, match=r"hung call did not return within 0\.5s"):
        call_with_deadline(release.wait, 0.5, "hung call")
    assert 0.5 <= time.monotonic() - started < 2.0
    release.set()  # the abandoned call still ends on its own thread
