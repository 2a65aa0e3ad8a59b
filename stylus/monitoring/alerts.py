"""Prometheus alerting rules and a scrape config for a pipeline, from its YAML thresholds.

Lag is the first thing to page on (the paper's lesson: with a persistent bus a processor's job is to
keep up), so every processor gets: lag in seconds above its threshold for a while, lag growing, the
processor down, checkpoints stalled, backups stale (when configured) and dead letters appearing.
Annotations only template labels, so promtool tests can state them exactly.
"""

from __future__ import annotations

from typing import Any

import yaml

from stylus.config.durations import format_duration
from stylus.config.model import Pipeline, ProcessorSpec

JOB_PREFIX = "stylus-"


def job_name(pipeline: Pipeline) -> str:
    return JOB_PREFIX + pipeline.pipeline


def _dur(seconds: float) -> str:
    return format_duration(seconds) if seconds > 0 else "0s"


def checkpoint_stale_after(spec: ProcessorSpec) -> float:
    return spec.alerts.checkpoint_stale or max(3 * spec.checkpoint.interval, 60.0)


def backup_stale_after(spec: ProcessorSpec) -> float | None:
    if spec.state.backup is None:
        return None
    return spec.alerts.backup_stale or 2 * spec.state.backup.interval + 60.0


def _rule(name: str, expr: str, for_: float, severity: str, summary: str, description: str,
          pipeline: Pipeline, processor: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": _dur(for_),
        "labels": {"severity": severity, "pipeline": pipeline.pipeline, "processor": processor},
        "annotations": {"summary": summary, "description": description},
    }


def processor_rules(pipeline: Pipeline, name: str) -> list[dict[str, Any]]:
    spec = pipeline.processors[name]
    alerts = spec.alerts
    sel = f'pipeline="{pipeline.pipeline}",processor="{name}"'
    by = "by (pipeline, processor)"
    where = f"`{name}` of pipeline `{pipeline.pipeline}`"
    look = f"Run `stylus lag` on the pipeline file of `{pipeline.pipeline}`; the status page (`stylus ui`) " \
           "points at the furthest-upstream lagging processor."
    rules = [
        _rule("StylusLagHigh",
              f"max {by} (stylus_consumer_lag_seconds{{{sel}}}) > {alerts.lag_seconds:g}",
              alerts.for_, "page",
              f"{where} is more than {_dur(alerts.lag_seconds)} behind its input",
              f"The oldest unprocessed input record is older than {_dur(alerts.lag_seconds)}. {look}",
              pipeline, name),
        _rule("StylusLagGrowing",
              f"sum {by} (deriv(stylus_consumer_lag_messages{{{sel}}}[5m])) > 0",
              alerts.growing_for, "warning",
              f"{where} is falling behind: its lag has grown for {_dur(alerts.growing_for)}",
              f"Input arrives faster than it is processed. {look}",
              pipeline, name),
        _rule("StylusProcessorDown",
              f"(max {by} (stylus_processor_running{{{sel}}}) == 0) or absent(stylus_processor_running{{{sel}}})",
              alerts.down_for, "page",
              f"{where} is not running",
              "No instance reports the processor running (stopped, crashed or not scraped). Its input backs up "
              "on the bus; restart it and watch `stylus lag`.",
              pipeline, name),
        _rule("StylusCheckpointsStalled",
              f"(time() - stylus_last_checkpoint_timestamp_seconds{{{sel}}} > {checkpoint_stale_after(spec):g})"
              f" and (stylus_last_checkpoint_timestamp_seconds{{{sel}}} > 0)"
              f" and (stylus_assigned_partitions{{{sel}}} > 0)",
              60.0, "page",
              f"{where} has not checkpointed for {_dur(checkpoint_stale_after(spec))}",
              f"Checkpoints run every {_dur(spec.checkpoint.interval)}; none succeeded lately on an instance "
              "with partitions. A restart would replay everything since the last one.",
              pipeline, name),
    ]
    stale = backup_stale_after(spec)
    if stale is not None:
        rules.append(_rule(
            "StylusBackupStale", f"max {by} (stylus_backup_age_seconds{{{sel}}}) > {stale:g}", 60.0, "warning",
            f"{where} has no state backup newer than {_dur(stale)}",
            "Backups of the local RocksDB state are late; losing the machine now would mean a long rebuild.",
            pipeline, name))
    if alerts.dead_letters:
        rules.append(_rule(
            "StylusDeadLetters", f"sum {by} (increase(stylus_dead_letters_total{{{sel}}}[5m])) > 0", 0.0, "warning",
            f"{where} is dead-lettering records",
            f"Records failed and went to `{pipeline.dlq_topic(name)}`. Inspect them with `stylus dlq` and "
            "re-inject after a fix.",
            pipeline, name))
    return rules


def alert_rules(pipeline: Pipeline) -> dict[str, Any]:
    """The rule file as data: one group per pipeline, processors in topological order."""
    rules = [r for name in pipeline.topological_order() for r in processor_rules(pipeline, name)]
    return {"groups": [{"name": f"stylus-{pipeline.pipeline}", "rules": rules}]}


def render_rules(pipeline: Pipeline) -> str:
    header = f"# Prometheus alerting rules for pipeline {pipeline.pipeline}; generated by `stylus alerts`.\n"
    return header + yaml.safe_dump(alert_rules(pipeline), sort_keys=False, width=1000)


def scrape_config(pipeline: Pipeline, targets: list[str], rule_files: list[str] | None = None,
                  interval: str = "15s") -> str:
    """A prometheus.yml scraping the pipeline's `stylus run --metrics-port` endpoints."""
    doc: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": rule_files or [f"{pipeline.pipeline}.rules.yml"],
        "scrape_configs": [{
            "job_name": job_name(pipeline),
            "metrics_path": "/metrics",
            # no target label `pipeline`: the metrics carry it, and a clash would rename theirs
            "static_configs": [{"targets": targets}],
        }],
    }
    header = (f"# Prometheus scrape config for pipeline {pipeline.pipeline}; generated by `stylus alerts "
              "--scrape-config`.\n# Targets are `stylus run PIPELINE --metrics-port N` endpoints (one per process).\n")
    return header + yaml.safe_dump(doc, sort_keys=False)
