"""Live pipeline status for the built-in status page: lag and throughput on every DAG edge, alerts
evaluated with the YAML thresholds, and the likely cause when several processors lag.

Everything comes from Kafka (committed offsets, end offsets, record timestamps), so it works for
processors running anywhere, with no Prometheus or Grafana: the embedded default's monitoring.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from stylus.config.model import Pipeline
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.monitoring.lag import PartitionLag, pipeline_lag

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    at: float
    lag: list[PartitionLag]
    topic_ends: dict[str, int]  # sum of end offsets per topic: produced-record counter


@dataclass
class AlertState:
    name: str
    processor: str
    since: float  # when the condition became true
    firing: bool
    detail: str


@dataclass
class Status:
    at: float
    processors: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[AlertState] = field(default_factory=list)
    likely_cause: str | None = None
    error: str | None = None


def depths(pipeline: Pipeline) -> dict[str, int]:
    """Column of every node ("topic:NAME" / "proc:NAME"): source topics 0, then alternating."""
    out: dict[str, int] = {}
    for topic in pipeline.topics:
        if not pipeline.producers_of(topic):
            out[f"topic:{topic}"] = 0
    for name in pipeline.topological_order():
        spec = pipeline.processors[name]
        d = 1 + max((out.get(f"topic:{t}", 0) for t in spec.inputs), default=0)
        out[f"proc:{name}"] = d
        for t in spec.outputs:
            out[f"topic:{t}"] = max(out.get(f"topic:{t}", 0), d + 1)
    for topic in pipeline.topics:
        out.setdefault(f"topic:{topic}", 0)
    return out


def ancestors(pipeline: Pipeline, name: str) -> set[str]:
    seen: set[str] = set()
    todo = list(pipeline.upstream_of(name))
    while todo:
        up = todo.pop()
        if up not in seen:
            seen.add(up)
            todo.extend(pipeline.upstream_of(up))
    return seen


def likely_cause(pipeline: Pipeline, lagging: set[str]) -> str | None:
    """The lagging processor furthest upstream: no lagging ancestor, then the smallest depth."""
    if not lagging:
        return None
    roots = [n for n in lagging if not (ancestors(pipeline, n) & lagging)]
    column = depths(pipeline)
    order = pipeline.topological_order()
    return min(roots, key=lambda n: (column[f"proc:{n}"], order.index(n)))


class StatusTracker:
    """Keeps recent samples; derives rates over `window` seconds and alert states."""

    def __init__(self, pipeline: Pipeline, window: float = 10.0) -> None:
        self.pipeline = pipeline
        self.window = window
        self.samples: deque[Sample] = deque(maxlen=2000)
        self.pending: dict[tuple[str, str], float] = {}  # (alert, processor) -> condition true since

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        horizon = sample.at - max(self.window, *(p.alerts.growing_for for p in self.pipeline.processors.values()))
        while len(self.samples) > 2 and self.samples[1].at < horizon:
            self.samples.popleft()

    def _past(self, seconds: float) -> Sample | None:
        """The newest sample at least `seconds` older than the latest (else the oldest one)."""
        latest = self.samples[-1]
        chosen = None
        for s in self.samples:
            if latest.at - s.at >= seconds:
                chosen = s
        return chosen or (self.samples[0] if self.samples[0] is not latest else None)

    def status(self) -> Status:
        latest = self.samples[-1]
        past = self._past(self.window)
        dt = (latest.at - past.at) if past else 0.0
        pipe = self.pipeline
        per: dict[str, list[PartitionLag]] = {}
        for row in latest.lag:
            per.setdefault(row.processor, []).append(row)
        old: dict[tuple[str, str, int], PartitionLag] = {}
        if past:
            old = {(r.processor, r.topic, r.partition): r for r in past.lag}
        st = Status(at=latest.at)
        for name in pipe.topological_order():
            rows = per.get(name, [])
            consumed = 0
            for r in rows:
                before = old.get((r.processor, r.topic, r.partition))
                if before is not None:
                    consumed += (r.end - r.lag_messages) - (before.end - before.lag_messages)
            rate = consumed / dt if dt > 0 else 0.0
            st.processors[name] = {
                "lag_messages": sum(r.lag_messages for r in rows),
                "lag_seconds": max((r.lag_seconds for r in rows), default=0.0),
                "rate_in": max(0.0, rate),
                "threshold_seconds": pipe.processors[name].alerts.lag_seconds,
                "partitions": [r.as_dict() for r in rows],
            }
            for topic in pipe.processors[name].inputs:
                trows = [r for r in rows if r.topic == topic]
                trate = 0.0
                if dt > 0:
                    moved = 0
                    for r in trows:
                        before = old.get((r.processor, r.topic, r.partition))
                        if before is not None:
                            moved += (r.end - r.lag_messages) - (before.end - before.lag_messages)
                    trate = max(0.0, moved / dt)
                st.edges.append({"from": f"topic:{topic}", "to": f"proc:{name}", "kind": "input",
                                 "lag_messages": sum(r.lag_messages for r in trows),
                                 "lag_seconds": max((r.lag_seconds for r in trows), default=0.0),
                                 "rate": trate})
            for topic in pipe.processors[name].outputs:
                produced = latest.topic_ends.get(topic, 0) - (past.topic_ends.get(topic, 0) if past else 0)
                st.edges.append({"from": f"proc:{name}", "to": f"topic:{topic}", "kind": "output",
                                 "rate": max(0.0, produced / dt) if dt > 0 else 0.0})
        self._alerts(st)
        return st

    def _alerts(self, st: Status) -> None:
        now = st.at
        pipe = self.pipeline
        active: set[tuple[str, str]] = set()
        lagging: set[str] = set()
        for name, proc in st.processors.items():
            spec = pipe.processors[name].alerts
            if proc["lag_seconds"] > spec.lag_seconds:
                lagging.add(name)
                active.add(("StylusLagHigh", name))
                since = self.pending.setdefault(("StylusLagHigh", name), now)
                st.alerts.append(AlertState("StylusLagHigh", name, since, now - since >= spec.for_,
                                            f"oldest unprocessed record {proc['lag_seconds']:.1f}s old "
                                            f"(threshold {spec.lag_seconds:g}s)"))
            grown = self._grown(name, spec.growing_for)
            if grown:
                active.add(("StylusLagGrowing", name))
                since = self.pending.setdefault(("StylusLagGrowing", name), now)
                st.alerts.append(AlertState("StylusLagGrowing", name, since, True,
                                            f"lag grew by {grown} records over {spec.growing_for:g}s"))
        for key in list(self.pending):
            if key not in active:
                del self.pending[key]
        st.likely_cause = likely_cause(pipe, lagging) if len(lagging) else None

    def _grown(self, name: str, seconds: float) -> int:
        """Records the lag grew by, if it never shrank over the last `seconds` (covered by samples)."""
        latest = self.samples[-1]
        if latest.at - self.samples[0].at < seconds:
            return 0
        series = [sum(r.lag_messages for r in s.lag if r.processor == name)
                  for s in self.samples if latest.at - s.at <= seconds]
        if len(series) < 3 or any(b < a for a, b in itertools.pairwise(series)):
            return 0
        return max(0, series[-1] - series[0])


def take_sample(pipeline: Pipeline, bootstrap: str) -> Sample:
    at = time.time()
    lag = pipeline_lag(pipeline, bootstrap, now=at)
    outputs = sorted({t for p in pipeline.processors.values() for t in p.outputs})
    ends = end_offsets(bootstrap, topic_partitions(bootstrap, outputs))
    sums: dict[str, int] = {}
    for (topic, _), (_, high) in ends.items():
        sums[topic] = sums.get(topic, 0) + high
    return Sample(at, lag, sums)


class StatusPoller:
    """Samples Kafka every `interval` seconds in a background thread."""

    def __init__(self, pipeline: Pipeline, bootstrap: str, interval: float = 2.0, window: float = 10.0) -> None:
        self.pipeline = pipeline
        self.bootstrap = bootstrap
        self.interval = interval
        self.tracker = StatusTracker(pipeline, window)
        self.stop = threading.Event()
        self.error: str | None = None
        self._lock = threading.Lock()
        self._status: Status | None = None
        self.thread = threading.Thread(target=self._run, name="stylus-status", daemon=True)

    def start(self) -> StatusPoller:
        self.thread.start()
        return self

    def poll_once(self) -> Status:
        sample = take_sample(self.pipeline, self.bootstrap)
        with self._lock:
            self.tracker.add(sample)
            self._status = self.tracker.status()
            return self._status

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll_once()
                self.error = None
            except Exception as exc:  # the broker may be briefly away; keep the page up and say so
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("status poll failed: %s", self.error)
            self.stop.wait(self.interval)

    def status(self) -> Status | None:
        with self._lock:
            st = self._status
        if st is not None:
            st.error = self.error
        return st

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
