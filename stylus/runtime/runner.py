"""Run several processors of a pipeline in one process (development mode), one thread each.

Each worker owns its consumer and producer; the threads share nothing but a stop event and the
"finished" flags that let a downstream worker know its in-process upstream has drained.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from stylus.config.model import Pipeline
from stylus.core.engine import StopProcessing
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.reach import probe
from stylus.kafka.settings import bootstrap_from, bootstrap_origin, remember_connection
from stylus.runtime.executable import ExecutableWorker
from stylus.runtime.worker import Worker, WorkerFailed
from stylus.state.preflight import check_state_dirs

log = logging.getLogger(__name__)


@contextmanager
def resolved_bootstrap(pipeline: Pipeline | None, announce: bool = True) -> Iterator[str]:
    """The configured bootstrap servers, once they answer (else `BrokerUnreachable`, in a few seconds), or an
    embedded broker started for the duration."""
    configured = bootstrap_from(pipeline)
    if configured:
        remember_connection(configured, pipeline)
        probe(configured, pipeline, bootstrap_origin(pipeline))
        yield configured
        return
    with EmbeddedBroker() as broker:
        if announce:
            log.warning("no bootstrap servers configured: started the embedded broker at %s", broker.bootstrap)
        yield broker.bootstrap


class PipelineRunner:
    def __init__(
        self,
        pipeline: Pipeline,
        bootstrap: str,
        processors: list[str] | None = None,
        *,
        exit_when_idle: float | None = None,
        stop: threading.Event | None = None,
        instance: str = "0",
    ) -> None:
        self.pipeline = pipeline
        self.bootstrap = bootstrap
        self.names = processors or pipeline.topological_order()
        unknown = [n for n in self.names if n not in pipeline.processors]
        if unknown:
            raise ValueError(f"unknown processor(s) {unknown}; the pipeline has {sorted(pipeline.processors)}")
        self.stop = stop or threading.Event()
        self.exit_when_idle = exit_when_idle
        self.instance = instance
        self.workers: dict[str, Worker | ExecutableWorker] = {}
        self.errors: dict[str, str] = {}

    def _upstream_done(self, name: str) -> bool:
        return all(self.workers[u].finished for u in self.pipeline.upstream_of(name) if u in self.workers)

    def start(self) -> list[threading.Thread]:
        check_state_dirs(self.pipeline, self.names)  # before any client: a clear error, not a worker traceback
        create_topics(self.bootstrap, pipeline_topics(self.pipeline), self.pipeline)
        for name in self.names:
            kind = ExecutableWorker if self.pipeline.processors[name].command is not None else Worker  # Swift
            self.workers[name] = kind(
                self.pipeline, name, self.bootstrap, stop=self.stop, exit_when_idle=self.exit_when_idle,
                upstream_done=functools.partial(self._upstream_done, name), instance=self.instance,
            )
        threads = [threading.Thread(target=self._run_one, args=(n,), name=f"stylus-{n}", daemon=True)
                   for n in self.names]
        for thread in threads:
            thread.start()
        return threads

    def _run_one(self, name: str) -> None:
        try:
            self.workers[name].run()
        except WorkerFailed as exc:
            self.errors[name] = str(exc)
            # a configured stop (bad input, `on_error: stop`) says all in its message; anything else is a
            # crash, whose traceback is what a person needs to find the cause
            configured = isinstance(exc.__cause__, StopProcessing)
            log.error("%s", exc, exc_info=None if configured else exc.__cause__)
            self.stop.set()  # in development mode one failing processor stops the others cleanly
        except BaseException as exc:
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            log.exception("processor %s crashed", name)
            self.stop.set()

    def run(self, install_signals: bool = True) -> int:
        """Block until stopped (signal), idle or failed. Returns the process exit code."""
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop.set())
        threads = self.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
        return 1 if self.errors else 0
