"""`stylus demo`: the trending-events pipeline end to end, with generated input and a live ranking.

Broker (embedded unless STYLUS_BOOTSTRAP_SERVERS is set), topics, a real-time event generator with
one burst, every processor in-process (one thread each), and a board that reads the ranked topic.
State goes to a fresh temporary directory: the embedded broker started for the demo keeps its data in a
temporary folder deleted when it stops, so offsets kept from an earlier run would point past the end of the
new topics.
"""

from __future__ import annotations

import gc
import logging
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson
from confluent_kafka import Consumer, TopicPartition

from stylus.config import load_pipeline
from stylus.config.model import Pipeline
from stylus.kafka.settings import connect

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PIPELINE = ROOT / "pipelines" / "trending_events.yaml"
BURST_AFTER = 15.0  # seconds into the run
BURST_FOR = 20.0
BURST_MULTIPLIER = 100.0
BURST_TOPIC = "music"
SHOW = 5  # events per topic on the board
PLAIN_EVERY = 5.0  # seconds between boards in --plain mode (the terminal view redraws every second)


def with_state_dir(pipeline: Pipeline, state_dir: str) -> Pipeline:
    """The same pipeline with every processor's state under `state_dir`."""
    processors = {
        name: spec.model_copy(update={"state": spec.state.model_copy(update={"dir": state_dir})})
        for name, spec in pipeline.processors.items()
    }
    return pipeline.model_copy(update={"processors": processors})


def load_shipped_tables(pipeline: Pipeline, bootstrap: str) -> None:
    """The shipped dimension rows into the `dims` table's topic (the Joiner's lookups), before any processor
    starts: the Joiner's copy is caught up with them before its first record (docs/tables.md)."""
    if "dims" not in pipeline.tables:
        return
    from processors.dimensions import DEFAULT_PATH
    from stylus.kafka.admin import create_topics, pipeline_topics
    from stylus.tables.load import load_rows, read_rows

    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    log.info("loaded %d dimension rows into table dims",
             load_rows(bootstrap, pipeline, "dims", read_rows(DEFAULT_PATH)))


def source_topic(pipeline: Pipeline) -> str:
    """The first topic no processor writes: where generated events go."""
    produced = {t for spec in pipeline.processors.values() for t in spec.outputs}
    return next(t for t in pipeline.topics if t not in produced)


def result_topic(pipeline: Pipeline) -> str:
    """The last processor's first output: the ranking."""
    return pipeline.processors[pipeline.topological_order()[-1]].outputs[0]


class Board:
    """The latest ranking per topic, read from the ranked topic by assignment (no consumer group), and the best
    place the watched event (the burst) has held in any bucket: the latest bucket at the end of a run may hold
    only its first seconds, so it alone cannot say whether the burst was found."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, watch: str | None = None) -> None:
        self.consumer = Consumer(connect(bootstrap, **{
            "group.id": f"stylus-demo-board-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "fetch.wait.max.ms": 50, "fetch.queue.backoff.ms": 10,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        }))
        # from offset 0: the demo's topics are new; should 0 be below a partition's log start, the consumer
        # resets to that start (auto.offset.reset)
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.latest: dict[str, dict[str, Any]] = {}
        self.received = 0
        self.watch = watch
        self.best: Placing | None = None

    def poll(self, timeout: float = 0.0) -> None:
        while True:
            msgs = self.consumer.consume(num_messages=10_000, timeout=timeout)
            for msg in msgs:
                if msg.error() is None and msg.value() is not None:
                    self.update(orjson.loads(msg.value()))
            if len(msgs) < 10_000:
                return
            timeout = 0.0

    def update(self, result: dict[str, Any]) -> None:
        """Newer buckets replace older ones; within a bucket the latest result wins."""
        self.received += 1
        current = self.latest.get(result["topic"])
        if current is None or result["bucket_start"] >= current["bucket_start"]:
            self.latest[result["topic"]] = result
        for rank, item in enumerate(result["top"], 1):
            if item["event_id"] == self.watch:
                placing = Placing(rank, item["score"], result["topic"], result["bucket_start"], result["bucket_end"])
                if self.best is None or placing.beats(self.best):
                    self.best = placing

    def close(self) -> None:
        self.consumer.close()


@dataclass(frozen=True)
class Placing:
    """Where an event stood in one bucket's ranking."""

    rank: int
    score: float
    topic: str
    bucket_start: int
    bucket_end: int

    def beats(self, other: Placing) -> bool:
        return (self.rank, -self.score) < (other.rank, -other.score)

    def __str__(self) -> str:
        return (f"#{self.rank} in {self.topic} {_clock(self.bucket_start)}-{_clock(self.bucket_end)} "
                f"(score {self.score:.1f})")


def render(board: Board, counts: dict[str, int], generated: int, elapsed: float) -> str:
    """The board as text: two columns of topics, then per-processor counts; the watched event is the burst."""
    burst = board.watch
    blocks = []
    for topic in sorted(board.latest):
        result = board.latest[topic]
        span = f"{_clock(result['bucket_start'])}-{_clock(result['bucket_end'])}"
        lines = [f"{topic:<9} {span} {'final' if result['final'] else 'live'}"]
        for i, item in enumerate(result["top"][:SHOW], 1):
            mark = " <- burst" if item["event_id"] == burst else ""
            lines.append(f"  {i}. {item['event_id']:<6} {item['score']:>8.1f}{mark}")
        lines += [""] * (SHOW + 1 - len(lines))
        blocks.append(lines)
    out = [f"stylus demo: trending events  t={elapsed:5.1f}s  generated={generated}  rankings={board.received}"]
    found = f"best place: {board.best}" if board.best else "not ranked yet"
    out.append(f"burst: {burst} ({BURST_TOPIC}) from +{BURST_AFTER:.0f}s for {BURST_FOR:.0f}s; {found}")
    out.append("")
    if not blocks:
        out.append("(waiting for the first ranking...)")
    for i in range(0, len(blocks), 2):
        pair = blocks[i:i + 2]
        for row in range(SHOW + 1):
            out.append("   ".join(f"{b[row]:<38}" for b in pair).rstrip())
        out.append("")
    out.append("processed: " + "  ".join(f"{name}={n}" for name, n in counts.items()))
    return "\n".join(out) + "\n"


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


class _Generator(threading.Thread):
    """Produces `rate` events per second of wall time (event time = now) until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int, burst: Any) -> None:
        super().__init__(name="stylus-demo-generator", daemon=True)
        from processors.generator import EventGenerator, GeneratorConfig, producer_for

        self.stop = threading.Event()
        self.rate = rate
        self.topic = topic
        self.producer = producer_for(bootstrap)
        self.generator = EventGenerator(GeneratorConfig(rate=rate, start_ms=burst.start - int(BURST_AFTER * 1000),
                                                        bursts=(burst,)))
        self.error: BaseException | None = None

    @property
    def produced(self) -> int:
        return self.generator.produced

    def run(self) -> None:
        from processors.generator import produce_records

        began = time.monotonic()
        try:
            while not self.stop.is_set():
                due = int((time.monotonic() - began) * self.rate) + 1
                if due > self.generator.produced:
                    produce_records(self.producer, self.topic, self.generator.take(due - self.generator.produced))
                self.stop.wait(0.05)
            self.producer.flush(10)
        except BaseException as exc:  # reported by the main loop
            self.error = exc


def run_demo(pipeline_file: str | None, *, duration: float | None, rate: int, plain: bool,
             out: TextIO | None = None, ui_port: int = 0) -> int:
    """Run the demo until `duration` seconds after the first generated event (or Ctrl-C); print the final
    ranking; 0 on success."""
    from stylus.extras import require

    require("demo", "stylus demo")
    from processors.generator import Burst, pick_event
    from stylus.runtime.runner import PipelineRunner, resolved_bootstrap

    stream = out or sys.stdout
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # the `processors` package, wherever the demo is started from
    path = Path(pipeline_file) if pipeline_file else DEFAULT_PIPELINE
    redraw = not plain and stream.isatty()
    logging.getLogger("stylus").setLevel(logging.WARNING)
    state_dir = tempfile.mkdtemp(prefix="stylus-demo-")
    pipeline = with_state_dir(load_pipeline(path, import_classes=True), state_dir)
    stop = threading.Event()
    previous = _install_signals(stop)
    started = time.monotonic()
    try:
        with resolved_bootstrap(pipeline, announce=False) as bootstrap:
            print(f"bootstrap servers: {bootstrap}  pipeline: {path}  state: {state_dir}", file=stream, flush=True)
            load_shipped_tables(pipeline, bootstrap)
            runner = PipelineRunner(pipeline, bootstrap)
            threads = runner.start()
            from stylus.monitoring.ui import StatusServer  # the built-in status page (lag on every edge)

            status_page = StatusServer(pipeline, bootstrap, port=ui_port).start()
            print(f"status page: {status_page.url}", file=stream, flush=True)
            burst = Burst(pick_event(BURST_TOPIC, 100), int(time.time() * 1000 + BURST_AFTER * 1000),
                          int(BURST_FOR * 1000), BURST_MULTIPLIER)
            generator = _Generator(bootstrap, source_topic(pipeline), rate, burst)
            started = time.monotonic()  # `duration` counts from the first event: the broker's start and the
            # table load before it vary with the machine, the burst's place in the run must not
            generator.start()
            ranked = result_topic(pipeline)
            board = Board(bootstrap, ranked, pipeline.topics[ranked].partitions, watch=burst.event)
            every = 1.0 if redraw else PLAIN_EVERY
            next_draw = time.monotonic() + every

            def counts() -> dict[str, int]:
                return {name: w.processed for name, w in runner.workers.items()}

            while not stop.is_set() and not runner.errors and generator.error is None:
                elapsed = time.monotonic() - started
                if duration is not None and elapsed >= duration:
                    break
                board.poll(timeout=0.2)
                if time.monotonic() >= next_draw:
                    text = render(board, counts(), generator.produced, elapsed)
                    stream.write(("\x1b[H\x1b[2J" + text) if redraw else text + "\n")
                    stream.flush()
                    next_draw += every
            generator.stop.set()
            generator.join(15)
            _drain(runner, board)
            runner.stop.set()
            for thread in threads:
                thread.join(30)
            board.poll(timeout=0.5)
            board.close()
            stream.write("\nfinal ranking (latest bucket per topic):\n")
            stream.write(render(board, counts(), generator.produced, time.monotonic() - started))
            for name, error in runner.errors.items():
                stream.write(f"error: {name}: {error}\n")
            if generator.error is not None:
                stream.write(f"error: generator: {generator.error}\n")
            stream.flush()
            code = 1 if runner.errors or generator.error is not None else 0
            # drop every client before the embedded broker stops, or librdkafka logs the disconnects
            status_page.stop()
            runner.workers.clear()
            del generator, board
            gc.collect()
            return code
    finally:
        _restore_signals(previous)
        shutil.rmtree(state_dir, ignore_errors=True)


def _drain(runner: Any, board: Board, limit: float = 10.0) -> None:
    """Let the pipeline finish what was generated: wait until no processor has made progress for 1.5 s."""
    deadline = time.monotonic() + limit
    last: dict[str, int] = {}
    quiet_since = time.monotonic()
    while time.monotonic() < deadline and not runner.errors:
        board.poll(timeout=0.2)
        now_counts = {name: w.processed for name, w in runner.workers.items()}
        if now_counts != last:
            last, quiet_since = now_counts, time.monotonic()
        elif time.monotonic() - quiet_since >= 1.5:
            return


def _install_signals(stop: threading.Event) -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    return previous


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
