"""`TestDriver`: a processor, or a whole pipeline, run in process on the production `Engine`, with no broker.

Records sent to a topic are processed at once by every processor of the driver that reads it, in the
pipeline's topological order, so one call carries a record through every stage. Everything is in
memory and single-threaded: the same calls give the same outputs, and a test takes milliseconds.
The reference is docs/testing.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from stylus.config import Pipeline, load_pipeline
from stylus.core.task import NO_TIME
from stylus.runtime.checkpoint import Step
from stylus.serde import encode_key, encoder
from stylus.testing.records import Record, decoded
from stylus.testing.sink import header_pairs
from stylus.testing.stage import Stage
from stylus.testing.topics import Status, Topics

Watermarks = Literal["manual", "auto"]


class TestDriver:
    """Send records, move event time and the clock, read outputs and state, checkpoint and crash.

    `watermarks="manual"` (default): watermarks move only by `advance_watermark`; `"auto"`: as in production,
    from the data (largest event time less `allowed_lateness`, idle partitions per `idle_timeout` on the
    driver's clock) and across stages by the upstream's watermark control records.
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, pipeline: str | Path | Pipeline, processors: str | Iterable[str] | None = None, *,
                 watermarks: Watermarks = "manual", start_time: int = 0,
                 config: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """`processors`: the ones to run (default: all); `start_time`: the wall clock at the start (ms);
        `config`: per processor, entries laid over its YAML `config`."""
        loaded = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
        self.pipeline = _with_config(loaded, config or {})
        order = self.pipeline.topological_order()
        names = [processors] if isinstance(processors, str) else list(processors) if processors is not None else order
        from stylus.sql.expand import stages_of  # the YAML name of a `sql:` app stands for all its processors

        names = [stage for name in names for stage in (stages_of(self.pipeline, name) or [name])]
        unknown = sorted(set(names) - set(order))
        if unknown:
            raise ValueError(f"unknown processor(s) {unknown}; the pipeline has {sorted(order)}")
        if watermarks not in ("manual", "auto"):
            raise ValueError(f"watermarks is `manual` or `auto`, not {watermarks!r}")
        chosen = [n for n in order if n in names]
        # the processors not run here are outside: topics they write are inputs you `send` to, and their
        # watermarks are not waited for
        inner = self.pipeline.model_copy(update={"processors": {n: self.pipeline.processors[n] for n in chosen}})
        self.topics = Topics(self.pipeline)
        self.time = start_time  # the driver's wall clock (ms): default record timestamps, idle timeouts
        self._start_time = start_time
        self._watermark = NO_TIME
        self._closed = False
        self.stages = {n: Stage(inner, n, self.topics, self._clock, manual=watermarks == "manual") for n in chosen}
        self._pump()

    # ------------------------------------------------------------------ input and time
    def send(self, topic: str, value: Any, key: str | bytes | None = None, timestamp: int | None = None,
             headers: Mapping[str, str | bytes] | list[tuple[str, str | bytes]] | None = None,
             partition: int | None = None) -> Record:
        """Produce one record (encoded by the topic's serde, `bytes` as they are; partitioned by murmur2 of its
        key like every producer of the runtime) and process it through every stage. Returns it as written."""
        record = self._append(topic, value, key, timestamp, headers, partition)
        self._pump()
        return record

    def send_many(self, topic: str, values: Iterable[Any], keys: Iterable[str | bytes | None] | None = None,
                  timestamp: int | None = None) -> list[Record]:
        """Produce several records (each as `send` would; `keys`, one per value, default none), then process them:
        every stage reads them in one consumed batch, as a worker reads a backlog (a batch processor gets them as
        one batch per partition)."""
        values = list(values)
        key_list = list(keys) if keys is not None else [None] * len(values)
        if len(key_list) != len(values):
            raise ValueError(f"{len(key_list)} keys for {len(values)} values")
        written = [self._append(topic, value, key, timestamp, None, None)
                   for value, key in zip(values, key_list, strict=True)]
        self._pump()
        return written

    def _append(self, topic: str, value: Any, key: str | bytes | None, timestamp: int | None,
                headers: Mapping[str, str | bytes] | list[tuple[str, str | bytes]] | None,
                partition: int | None) -> Record:
        spec = self.pipeline.topics.get(topic)
        if spec is None:
            raise KeyError(f"`{topic}` is not declared under `topics:`; declared: {sorted(self.pipeline.topics)}")
        raw_key = encode_key(key)
        data = value if value is None or isinstance(value, bytes) else encoder(spec.serde)(value)
        stamp = self.time if timestamp is None else int(timestamp)
        part = self.topics.pick_partition(topic, raw_key, partition)
        entry = self.topics.append(topic, part, raw_key, data, stamp, header_pairs(headers))
        return decoded(self.pipeline, topic, part, entry.offset, raw_key, data, stamp, entry.headers)

    def advance_watermark(self, watermark: int) -> None:
        """Every processor's low watermark becomes `watermark` (never lower than it was): timers up to it fire
        and the windows ending by it close, upstream stages first so their results reach the next ones."""
        self._watermark = max(self._watermark, int(watermark))
        for stage in self.stages.values():
            stage.set_mark(self._watermark)
        self._pump()

    def advance_clock(self, ms: int) -> None:
        """Move the wall clock: the default timestamp of `send`, the time in dead letters, and (with
        `watermarks="auto"`) how long a partition has been idle. Processors have no processing-time timers;
        checkpoints happen only when you call `checkpoint`."""
        if ms < 0:
            raise ValueError("the clock does not go back")
        self.time += int(ms)
        self._pump()

    # ------------------------------------------------------------------ checkpoints and crashes
    def checkpoint(self, processor: str | None = None) -> None:
        """Take a checkpoint (of every processor, or one): its state, input offsets and held output are saved
        in the order of its semantics (docs/semantics.md)."""
        for stage in self._chosen(processor):
            stage.checkpoint()
        self._pump()

    def crash(self, after: str | None = None, processor: str | None = None) -> None:
        """Kill every processor and restart it from what its last checkpoint saved; the records since then are
        read again. `after`: the crash interrupts a checkpoint once this step of its ordering is done
        (`emit`, `state`, `offsets`, `state+offsets` or `transaction`), in `processor` or in every processor
        whose ordering has that step: the crash points of docs/semantics.md."""
        if after is not None:
            step = Step(after)
            stages = self._chosen(processor)
            hit = [s for s in stages if step in s.ordering.steps]
            if not hit or (processor is not None and len(hit) != len(stages)):
                names = {s.name: [x.value for x in s.ordering.steps] for s in stages}
                raise ValueError(f"no checkpoint step `{after}` in {names}")
            for stage in hit:
                stage.checkpoint(until=step)
        for stage in self.stages.values():
            stage.crash()
        self._pump()  # the replay, judged at the watermarks the checkpoints saved
        for stage in self.stages.values():
            stage.set_mark(self._watermark)  # what the test set did not go back: it applies again after the replay
        self._pump()

    # ------------------------------------------------------------------ reading
    def outputs(self, topic: str, *, committed: bool = False) -> list[Record]:
        """Every record written to `topic` (output, dead-letter or late topic), in the order written.
        `committed=True`: only what a `read_committed` consumer sees now, without at-most-once output still
        held for the checkpoint or exactly-once output in the open transaction."""
        wanted = (Status.VISIBLE,) if committed else (Status.VISIBLE, Status.HELD, Status.OPEN)
        return [decoded(self.pipeline, e.topic, e.partition, e.offset, e.key, e.value, e.timestamp, e.headers)
                for e in self.topics.entries(topic) if e.status in wanted and not e.control]

    def state(self, processor: str, partition: int = 0, topic: str | None = None) -> dict[str, Any]:
        """A copy of the processor's state for one input partition (of every input topic, or of `topic`),
        unsaved writes included; `{}` for a stateless processor."""
        return self._stage(processor).state(partition, topic)

    def watermark(self, processor: str) -> int:
        """The processor's current low watermark (ms); a very negative number before any."""
        return self._stage(processor).engine.watermark

    def processor(self, name: str) -> Any:
        """The running processor instance (a new one after each crash)."""
        return self._stage(name).processor

    def late(self, processor: str) -> dict[str, int]:
        """How many records the processor found behind its watermark since it last (re)started, by what its
        `event_time.late` did with them: `{"dropped": n, "redirected": n, "updated": n}`."""
        return self._stage(processor).engine.late.counters.as_dict()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Call every processor's `close`, as a clean shutdown does (no final checkpoint is needed here)."""
        if self._closed:
            return
        self._closed = True
        for stage in self.stages.values():
            stage.close()

    def __enter__(self) -> TestDriver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _clock(self) -> int:
        return self.time

    def _stage(self, name: str) -> Stage:
        stage = self.stages.get(name)
        if stage is None:
            raise KeyError(f"processor `{name}` is not run by this driver; it runs {sorted(self.stages)}")
        return stage

    def _chosen(self, processor: str | None) -> list[Stage]:
        return list(self.stages.values()) if processor is None else [self._stage(processor)]

    def _pump(self) -> None:
        """Each stage consumes all it can read, upstream first: a DAG needs one pass."""
        if self._closed:
            raise RuntimeError("this TestDriver is closed")
        # the engine measures idleness on the monotonic clock: the driver's clock runs ahead of it by what the
        # test advanced
        now = time.monotonic() + (self.time - self._start_time) / 1000.0
        for stage in self.stages.values():
            stage.run(now)


def _with_config(pipeline: Pipeline, config: Mapping[str, Mapping[str, Any]]) -> Pipeline:
    unknown = sorted(set(config) - set(pipeline.processors))
    if unknown:
        raise ValueError(f"config for unknown processor(s) {unknown}; the pipeline has {sorted(pipeline.processors)}")
    processors = {name: spec.model_copy(update={"config": {**spec.config, **config[name]}}) if name in config else spec
                  for name, spec in pipeline.processors.items()}
    return pipeline.model_copy(update={"processors": processors})
