"""Prometheus metrics for the workers of one process, read at scrape time.

A custom Collector reads the counters the workers already keep (and their `stats` timings), so
nothing is added to the per-record loop. Per-partition lag is the worker's own progress
(`next_offset`: records processed, checkpointed or not) against the true end offset
(`stylus.kafka.offsets.end_offsets`: the high watermark); lag in seconds is the age of
the record at that position, read once per (partition, position) and cached.

The worker's own consumer is never touched from the scrape thread: calling into a librdkafka handle
while its owner thread sits in consume() blocked the scrape in practice (measured). The probe uses
its own short-lived clients instead.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from stylus.config.model import Pipeline
from stylus.core.task import NO_TIME, PartitionTask
from stylus.kafka.offsets import end_offsets
from stylus.kafka.settings import connect
from stylus.monitoring.lag import age_seconds, first_timestamps
from stylus.runtime.executable import ExecutableWorker
from stylus.runtime.stats import Timing
from stylus.runtime.worker import Worker

log = logging.getLogger(__name__)

PART_LABELS = ["pipeline", "processor", "topic", "partition"]
PROC_LABELS = ["pipeline", "processor"]
TP = tuple[str, int]


class LagProbe:
    """Looks up what the worker's consumer cannot tell cheaply: committed offsets of partitions that
    have processed nothing yet, end offsets not fetched yet, and record timestamps. Cached."""

    def __init__(self, pipeline: Pipeline, bootstrap: str, timeout: float = 2.0) -> None:
        self.pipeline = pipeline
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._stamps: dict[tuple[TP, int], int] = {}
        self._committed: dict[tuple[str, TP], int | None] = {}
        self._consumers: dict[str, Consumer] = {}

    def committed(self, processor: str, tp: TP) -> int | None:
        key = (processor, tp)
        if key not in self._committed:
            consumer = self._consumers.get(processor)
            if consumer is None:
                consumer = Consumer(connect(self.bootstrap, **{
                    "group.id": self.pipeline.group_id(processor),
                    "client.id": f"stylus-metrics-{uuid.uuid4().hex[:6]}",
                    "enable.auto.commit": False}))
                self._consumers[processor] = consumer
            try:
                [got] = consumer.committed([TopicPartition(*tp)], timeout=self.timeout)
                self._committed[key] = got.offset if got.offset >= 0 else None
            except Exception as exc:  # a scrape must not fail on a slow broker: report no position
                log.debug("committed offset of %s for %s: %s", tp, processor, exc)
                return None
        return self._committed[key]

    def forget(self, processor: str, tp: TP) -> None:
        self._committed.pop((processor, tp), None)

    def ends(self, tps: list[TP]) -> dict[TP, tuple[int, int]]:
        try:
            return end_offsets(self.bootstrap, tps, timeout=self.timeout)
        except Exception as exc:
            log.debug("end offsets of %s: %s", tps, exc)
            return {}

    def timestamps(self, wanted: dict[TP, tuple[int, int]]) -> dict[TP, int]:
        """Timestamp of the record at each partition's position (start of the range)."""
        out: dict[TP, int] = {}
        missing: dict[TP, tuple[int, int]] = {}
        for tp, (start, end) in wanted.items():
            ts = self._stamps.get((tp, start))
            if ts is None:
                missing[tp] = (start, end)
            else:
                out[tp] = ts
        if missing:
            try:
                for tp, ts in first_timestamps(self.bootstrap, missing, timeout=self.timeout).items():
                    out[tp] = ts
                    self._stamps[(tp, missing[tp][0])] = ts
            except Exception as exc:
                log.debug("timestamps of %s: %s", sorted(missing), exc)
        if len(self._stamps) > 10_000:  # positions move on; keep only the ones asked for now
            self._stamps = {(tp, wanted[tp][0]): ts for tp, ts in out.items()}
        return out

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()


def _histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels, unit="")


def _add_timing(family: HistogramMetricFamily, labels: list[str], timing: Timing) -> None:
    family.add_metric(labels, timing.cumulative(), timing.total)


class StylusCollector(Collector):
    """Metrics of the workers returned by `workers()` (evaluated at each scrape)."""

    def __init__(self, pipeline: Pipeline, workers: Callable[[], Mapping[str, Worker | ExecutableWorker]],
                 bootstrap: str,
                 errors: Callable[[], Mapping[str, str]] = dict) -> None:
        self.pipeline = pipeline
        self.workers = workers
        self.errors = errors
        self.probe = LagProbe(pipeline, bootstrap)
        self._lock = threading.Lock()

    def describe(self) -> list[Any]:
        return []  # collected lazily: registering must not read workers that do not exist yet

    def collect(self) -> Iterator[Any]:
        with self._lock:  # concurrent scrapes share the probe's caches
            yield from self._collect()

    def _collect(self) -> Iterator[Any]:
        now = time.time()
        pipe = self.pipeline.pipeline
        lag_msgs = GaugeMetricFamily("stylus_consumer_lag_messages",
                                     "Records in the input partition not yet processed (end offset - position)",
                                     labels=PART_LABELS)
        lag_secs = GaugeMetricFamily("stylus_consumer_lag_seconds",
                                     "Age of the oldest record not yet processed; 0 when caught up",
                                     labels=PART_LABELS)
        position = GaugeMetricFamily("stylus_consumer_position", "Next input offset to process", labels=PART_LABELS)
        committed = GaugeMetricFamily("stylus_consumer_committed_offset",
                                      "Input offset saved by the last checkpoint", labels=PART_LABELS)
        end = GaugeMetricFamily("stylus_consumer_end_offset", "High watermark of the input partition",
                                labels=PART_LABELS)
        processed = CounterMetricFamily("stylus_records_processed", "Input records processed", labels=PROC_LABELS)
        emitted = CounterMetricFamily("stylus_records_emitted", "Records emitted (outputs and dead letters)",
                                      labels=PROC_LABELS)
        dead = CounterMetricFamily("stylus_dead_letters", "Records sent to the dead-letter topic",
                                   labels=PROC_LABELS)
        skipped = CounterMetricFamily("stylus_skipped_records", "Failing records skipped (on_error: skip)",
                                      labels=PROC_LABELS)
        late = CounterMetricFamily("stylus_late_records", "Records behind the watermark by more than the allowed "
                                   "lateness, by what happened to them (event_time.late)",
                                   labels=[*PROC_LABELS, "action"])
        rebalances = CounterMetricFamily("stylus_rebalances", "Partition assignment changes", labels=PROC_LABELS)
        duplicates = CounterMetricFamily("stylus_duplicates_dropped", "Input records dropped as repeats of an id "
                                         "seen inside the dedup window (counted in records processed too)",
                                         labels=PROC_LABELS)
        latency = _histogram("stylus_processing_latency_seconds",
                             "Time to process one consumed batch through the processor", PROC_LABELS)
        ckpt = _histogram("stylus_checkpoint_duration_seconds", "Duration of one checkpoint", PROC_LABELS)
        commit = _histogram("stylus_transaction_commit_duration_seconds",
                            "Duration of one transaction commit (exactly-once output)", PROC_LABELS)
        last_ckpt = GaugeMetricFamily("stylus_last_checkpoint_timestamp_seconds",
                                      "Wall-clock time of the last successful checkpoint (0: none yet)",
                                      labels=PROC_LABELS)
        interval = GaugeMetricFamily("stylus_checkpoint_interval_seconds", "Configured checkpoint interval",
                                     labels=PROC_LABELS)
        backup_age = GaugeMetricFamily("stylus_backup_age_seconds",
                                       "Seconds since the last state backup (since start when none yet)",
                                       labels=PROC_LABELS)
        backup_done = CounterMetricFamily("stylus_backups", "Partition state backups written", labels=PROC_LABELS)
        backup_failed = CounterMetricFamily("stylus_backup_failures", "Partition state backups that failed",
                                            labels=PROC_LABELS)
        wm_lag = GaugeMetricFamily("stylus_watermark_lag_seconds", "Wall clock minus the low watermark",
                                   labels=PROC_LABELS)
        assigned = GaugeMetricFamily("stylus_assigned_partitions", "Input partitions assigned to this instance",
                                     labels=PROC_LABELS)
        running = GaugeMetricFamily("stylus_processor_running", "1 while the processor runs, 0 once stopped/failed",
                                    labels=PROC_LABELS)
        restarts = CounterMetricFamily("stylus_command_restarts", "Times a `command` processor's program was "
                                       "restarted (it exited, stopped answering or broke the protocol)",
                                       labels=PROC_LABELS)
        in_flight = GaugeMetricFamily("stylus_work_in_flight", "Input records taken and not complete yet "
                                      "(`concurrency`: running, waiting for a slot or for their key)",
                                      labels=PROC_LABELS)
        work_retries = CounterMetricFamily("stylus_work_retries", "Records whose work was tried again after an "
                                           "attempt failed or timed out (`concurrency`)", labels=PROC_LABELS)
        given_up = CounterMetricFamily("stylus_outputs_given_up", "At-most-once outputs not sent, as the promise "
                                       "allows: their delivery failed for a passing cause (a cut connection, a "
                                       "broker restart), or the group moved on before their offsets were "
                                       "committed", labels=PROC_LABELS)
        work_timeouts = CounterMetricFamily("stylus_work_timeouts", "Attempts not complete within `work_timeout` "
                                            "(`concurrency`)", labels=PROC_LABELS)
        errors = self.errors()
        for name, worker in list(self.workers().items()):
            proc = [pipe, name]
            spec = worker.spec
            tasks = list(worker.tasks.values())
            for part, (pos, comm, hi, lag, secs) in self._lags(worker, tasks, now).items():
                labels = [pipe, name, part[0], str(part[1])]
                if pos is not None:
                    position.add_metric(labels, pos)
                if comm is not None:
                    committed.add_metric(labels, comm)
                if hi is not None:
                    end.add_metric(labels, hi)
                if lag is not None:
                    lag_msgs.add_metric(labels, lag)
                if secs is not None:
                    lag_secs.add_metric(labels, secs)
            processed.add_metric(proc, worker.processed)
            emitted.add_metric(proc, worker.sink.emitted)
            given_up.add_metric(proc, worker.sink.given_up)
            dead.add_metric(proc, worker.failures.dead_lettered)
            skipped.add_metric(proc, worker.failures.skipped)
            rebalances.add_metric(proc, worker.rebalances)
            _add_timing(ckpt, proc, worker.stats.checkpoint)
            last_ckpt.add_metric(proc, worker.stats.checkpoint.last_at)
            interval.add_metric(proc, spec.checkpoint.interval)
            assigned.add_metric(proc, len(tasks))
            running.add_metric(proc, 0 if worker.finished or name in errors else 1)
            if isinstance(worker, ExecutableWorker):  # no engine, state, timers nor backups
                restarts.add_metric(proc, worker.restarts)
                continue
            for action, count in worker.engine.late.counters.as_dict().items():
                late.add_metric([*proc, action], count)
            if spec.dedup is not None:
                duplicates.add_metric(proc, worker.duplicates)
            if worker.concurrent is not None:
                in_flight.add_metric(proc, worker.concurrent.incomplete)
                work_retries.add_metric(proc, worker.concurrent.retries)
                work_timeouts.add_metric(proc, worker.concurrent.timeouts)
            _add_timing(latency, proc, worker.stats.batch)
            _add_timing(commit, proc, worker.stats.commit)
            backups = worker.backups
            if backups is not None:
                since = backups.last_success or worker.stats.started_at
                backup_age.add_metric(proc, max(0.0, now - since))
                backup_done.add_metric(proc, backups.completed)
                backup_failed.add_metric(proc, backups.failures)
            watermark = worker.engine.watermark
            if spec.event_time is not None and watermark != NO_TIME:
                wm_lag.add_metric(proc, max(0.0, now - watermark / 1000.0))
        yield from (lag_msgs, lag_secs, position, committed, end, processed, emitted, dead, skipped, late,
                    rebalances, latency, ckpt, commit, last_ckpt, interval, backup_age, backup_done, backup_failed,
                    wm_lag, assigned, running, duplicates, restarts, in_flight, work_retries, work_timeouts,
                    given_up)

    def _lags(self, worker: Worker | ExecutableWorker, tasks: list[PartitionTask], now: float
              ) -> dict[TP, tuple[int | None, int | None, int | None, int | None, float | None]]:
        """Per task: (position, committed, end, lag messages, lag seconds); None where unknown (a lagging
        partition whose oldest record could not be read reports no lag seconds rather than a false 0)."""
        tps = [(task.topic, task.partition) for task in tasks]
        ends = self.probe.ends(tps) if tps else {}
        rows: dict[TP, tuple[int | None, int | None, int | None]] = {}
        for task, tp in zip(tasks, tps, strict=True):
            pos = task.next_offset
            if pos is None:  # nothing processed here yet: the group's committed offset is where it starts
                pos = self.probe.committed(worker.name, tp)
            else:
                self.probe.forget(worker.name, tp)
            low, high = ends.get(tp, (None, None))
            if pos is None:
                pos = low  # never committed: auto.offset.reset=earliest
            rows[tp] = (pos, task.committed_offset, high)
        wanted = {tp: (pos, high) for tp, (pos, _, high) in rows.items()
                  if pos is not None and high is not None and high > pos}
        stamps = self.probe.timestamps(wanted) if wanted else {}
        out: dict[TP, tuple[int | None, int | None, int | None, int | None, float | None]] = {}
        for tp, (pos, comm, high) in rows.items():
            if pos is None or high is None:
                out[tp] = (pos, comm, high, None, None)
                continue
            lag = max(0, high - pos)
            secs = (age_seconds(stamps[tp], now) if tp in stamps else None) if lag else 0.0
            out[tp] = (pos, comm, high, lag, secs)
        return out

    def close(self) -> None:
        self.probe.close()
