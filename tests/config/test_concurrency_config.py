"""`concurrency` (docs/acker.md): accepted only where its promise can be kept, each refusal with the place and
the fix."""

from __future__ import annotations

import pytest

from stylus.config import PipelineError, parse_pipeline

BASE = """\
pipeline: conc
topics:
  events: {partitions: 2}
  enriched: {partitions: 2}
  counts: {partitions: 2}
processors:
  enricher:
    class: processors.lookup:AsyncLookup
    inputs: [events]
    outputs: [enriched]
    concurrency: 64
"""


def problem(text: str, *, import_classes: bool = False) -> str:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text, file="p.yaml", import_classes=import_classes, environ={})
    return str(info.value)


def test_defaults_and_knobs() -> None:
    spec = parse_pipeline(BASE, import_classes=True).processors["enricher"]
    assert (spec.concurrency, spec.work_timeout, spec.work_attempts) == (64, 30.0, 3)
    assert spec.semantics.pair == ("at_least_once", "at_least_once")
    knobs = "    work_timeout: 500ms\n    work_attempts: 1\n    semantics: {output: at_least_once}\n"
    spec = parse_pipeline(BASE + knobs).processors["enricher"]
    assert (spec.work_timeout, spec.work_attempts, spec.stateful) == (0.5, 1, False)
    assert parse_pipeline(BASE.replace("    concurrency: 64\n", "")).processors["enricher"].concurrency is None


@pytest.mark.parametrize("semantics", ["{state: exactly_once, output: at_least_once}",
                                       "{state: exactly_once, output: exactly_once}", "{output: exactly_once}",
                                       "{state: at_most_once, output: at_most_once}", "{output: at_most_once}"])
def test_only_at_least_once_is_honoured(semantics: str) -> None:
    text = problem(BASE + f"    semantics: {semantics}\n")
    assert "processors.enricher" in text and "`concurrency` cannot honour" in text
    assert "records complete out of order" in text
    assert "use `semantics: {state: at_least_once, output: at_least_once}`" in text


@pytest.mark.parametrize(("setting", "why"), [
    ("event_time: {field: ts}", "the watermark would pass records still in flight"),
    ("dedup: {window: 10m}", "records finish out of order"),
])
def test_settings_that_need_records_in_order_are_refused(setting: str, why: str) -> None:
    text = problem(BASE + f"    {setting}\n")
    assert "cannot be combined with `concurrency`" in text and why in text and "remove `concurrency`" in text


def test_remote_state_and_commands_are_refused() -> None:
    text = problem(BASE + "    semantics: {state: at_least_once, output: at_least_once}\n"
                          "    state: {backend: postgres, dsn: postgresql://x@y/z}\n")
    assert "needs the rocksdb state backend" in text
    command = BASE.replace("class: processors.lookup:AsyncLookup", "command: [cat]")
    assert "a `command` processor pipelines its records with `command_window`" in problem(command)


def test_work_knobs_without_concurrency_are_refused() -> None:
    text = problem(BASE.replace("    concurrency: 64\n", "    work_timeout: 5s\n"))
    assert "work_timeout apply to concurrent work only" in text and "add `concurrency: N`" in text


def test_classes_with_timers_or_a_downstream_in_event_time_are_refused_when_imported() -> None:
    timers = BASE.replace("processors.lookup:AsyncLookup", "tests.apps.faulty:TimerFail")
    parse_pipeline(timers)  # the class is not imported here
    text = problem(timers, import_classes=True)
    assert "processors.enricher.concurrency" in text and "overrides `on_timer`" in text
    downstream = BASE + ("  counter:\n    class: tests.apps.counting:WordCount\n    inputs: [enriched]\n"
                         "    outputs: [counts]\n    event_time: {allowed_lateness: 1s}\n")
    text = problem(downstream, import_classes=True)
    assert "a processor downstream (counter, or further) works in event time" in text
