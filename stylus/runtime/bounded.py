"""A client call with a deadline the client itself does not keep.

librdkafka's `send_offsets_to_transaction` can block forever, past its own timeout, when the connection to
the group coordinator was lost at the wrong moment (librdkafka issues #5456 and #5511, open in 2.16; the
fault test that cuts every connection reproduces it). The call cannot be interrupted, so it runs on a
daemon thread of its own and the caller stops waiting at the deadline; the caller must then treat the
client as unusable (fence it with a new one) and never touch it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class CallStuck(RuntimeError):
    """The call did not return within its deadline; it may still be running on its own thread."""


def call_with_deadline(call: Callable[[], T], timeout: float, what: str) -> T:
    result: list[T] = []
    error: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the caller
            error.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"stylus-bounded-{what}", daemon=True).start()
    if not done.wait(timeout):
        raise CallStuck(f"{what} did not return within {timeout:g}s")
    if error:
        raise error[0]
    return result[0]
