"""Run one processor with a checkpoint ordering given on the command line, to prove that a wrong
ordering breaks its promise: python -m tests.apps.run_with_ordering PIPELINE PROCESSOR emit,state,offsets"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from stylus.config import load_pipeline
from stylus.kafka.settings import bootstrap_from
from stylus.runtime.checkpoint import Ordering, Step
from stylus.runtime.worker import Worker, WorkerFailed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pipeline")
    parser.add_argument("processor")
    parser.add_argument("steps", help="comma-separated step names, e.g. offsets,state,emit")
    parser.add_argument("--exit-when-idle", type=float, default=None)
    args = parser.parse_args()
    pipeline = load_pipeline(args.pipeline)
    bootstrap = bootstrap_from(pipeline)
    assert bootstrap, "set STYLUS_BOOTSTRAP_SERVERS"
    ordering = Ordering("custom", tuple(Step(s) for s in args.steps.split(",")))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker = Worker(pipeline, args.processor, bootstrap, stop=stop, exit_when_idle=args.exit_when_idle,
                    ordering=ordering)
    print(f"ordering {args.steps}", flush=True)
    try:
        worker.run()
    except WorkerFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
