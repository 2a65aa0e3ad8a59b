"""Garbage-collector settings for a process that runs workers.

CPython starts a young-generation collection every 700 net allocations of container objects. A worker
allocates several per record (the consumed message, the decoded value, the `Record`, output tuples), so
at a few hundred thousand records per second that is hundreds of collections per second, each rescanning
the batch still alive: a visible share of the worker thread. The engine itself creates no reference cycles, so
the collector is kept but run 70x less often; and what start-up loaded (modules, classes, the pipeline)
is frozen out of the full collections, which would otherwise walk it again and again.

`STYLUS_GC_GEN0` sets the young-generation threshold (default 50,000); `0` leaves the interpreter's
settings alone (for a processor that makes many short-lived cycles and would rather free them sooner).
"""

from __future__ import annotations

import gc
import logging
import os
import threading

log = logging.getLogger(__name__)

DEFAULT_GEN0 = 50_000
INTERPRETER_GEN0 = 700  # CPython's own default: anything else was chosen by the user, and is kept

_lock = threading.Lock()
_tuned = False


def tune_for_streaming() -> None:
    """Apply once per process (every worker of a process calls it as it starts)."""
    global _tuned
    with _lock:
        if _tuned:
            return
        _tuned = True
        setting = os.environ.get("STYLUS_GC_GEN0", "").strip()
        try:
            gen0 = int(setting) if setting else DEFAULT_GEN0
        except ValueError:
            log.warning("STYLUS_GC_GEN0=%r is not a whole number; keeping the interpreter's GC settings", setting)
            return
        current = gc.get_threshold()
        if gen0 <= 0 or current[0] != INTERPRETER_GEN0:
            return
        gc.collect()  # free start-up garbage first: only what is alive gets frozen
        gc.freeze()
        gc.set_threshold(gen0, *current[1:])
        log.debug("gc: young-generation threshold %d, %d start-up objects frozen", gen0, gc.get_freeze_count())
