"""Which engine runs a processor: the per-record `Engine`, or the columnar `BatchEngine` for a `BatchProcessor`
(docs/batch.md). The only place that tells them apart: the worker, the backfill task and the test driver build
their engine here. The batch engine (pyarrow, Polars) is imported only when a batch processor needs it."""

from __future__ import annotations

from stylus.api import BatchProcessor, Processor
from stylus.config.model import Pipeline, ProcessorSpec
from stylus.core.engine import Engine, FailureHandler
from stylus.core.sink import Sink
from stylus.extras import require


def engine_for(processor: Processor, name: str, spec: ProcessorSpec, pipeline: Pipeline, sink: Sink,
               failures: FailureHandler) -> Engine:
    if not isinstance(processor, BatchProcessor):
        return Engine(processor, name, spec, pipeline, sink, failures)
    require("batch", f"processor `{name}` (a BatchProcessor)")
    if getattr(spec, "concurrency", None) is not None:
        raise ValueError(f"processor `{name}` is a BatchProcessor: `concurrency` applies to per-record processors")
    if spec.dedup is not None and spec.on_error == "stop":
        raise ValueError(f"processor `{name}` is a BatchProcessor: `dedup` with `on_error: stop` is per-record only "
                         "(a batch's ids are remembered before it runs, so the record that stops would count as "
                         "seen); use `dead_letter` or `skip`")
    from stylus.core.batch.engine import BatchEngine

    return BatchEngine(processor, name, spec, pipeline, sink, failures)
