"""`command:` processors (docs/executable.md): exactly one of `class`/`command`, at-least-once and stateless
only, knobs that apply to commands only, and a program `validate` can find, each with the place and the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stylus.config import PipelineError, load_pipeline, parse_pipeline
from tests.support.cli import ROOT, run_stylus

BASE = """\
pipeline: swift
topics:
  sentences: {partitions: 2}
  words: {partitions: 2}
processors:
  splitter:
    command: [jq, --unbuffered, -c, "[{value: .value}]"]
    inputs: [sentences]
    outputs: [words]
"""


def problem(text: str, *, import_classes: bool = False, file: str = "p.yaml") -> str:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text, file=file, import_classes=import_classes, environ={})
    return str(info.value)


def test_a_command_processor_is_stateless_at_least_once_by_default() -> None:
    spec = parse_pipeline(BASE, import_classes=True).processors["splitter"]
    assert spec.command == ("jq", "--unbuffered", "-c", "[{value: .value}]") and spec.class_ is None
    assert spec.semantics.pair == (None, "at_least_once") and not spec.stateful
    assert (spec.command_timeout, spec.command_window, spec.command_attempts) == (30.0, 1000, 3)


def test_class_and_command_together_or_neither() -> None:
    both = problem(BASE.replace("    inputs: [sentences]", "    class: a.b:C\n    inputs: [sentences]"))
    assert "processors.splitter" in both and "not both" in both and "keep one of `class" in both
    neither = problem(BASE.replace('    command: [jq, --unbuffered, -c, "[{value: .value}]"]\n', ""))
    assert "has neither" in neither and "command: [./program, arg]" in neither


@pytest.mark.parametrize("semantics", ["{state: at_least_once, output: at_least_once}", "{output: at_most_once}",
                                       "{state: exactly_once, output: exactly_once}"])
def test_other_semantics_are_refused(semantics: str) -> None:
    text = problem(BASE + f"    semantics: {semantics}\n")
    assert "processors.splitter" in text and "at-least-once and stateless" in text
    assert "use `semantics: {output: at_least_once}`" in text


def test_state_and_time_settings_need_a_python_processor() -> None:
    text = problem(BASE + "    event_time: {field: ts}\n")
    assert "event_time need(s) a Python processor" in text and "remove event_time" in text


def test_command_knobs_on_a_class_processor_are_refused() -> None:
    text = BASE.replace('command: [jq, --unbuffered, -c, "[{value: .value}]"]',
                        "class: tests.apps.counting:Passthrough")
    error = problem(text + "    command_timeout: 5s\n    checkpoint: {records: 10}\n")
    assert "command_timeout, checkpoint.records apply to `command` processors only" in error


def test_swift_checkpoint_knobs() -> None:
    spec = parse_pipeline(BASE + "    checkpoint: {interval: 1s, records: 500, bytes: 65536}\n    command_timeout: 2s\n"
                          ).processors["splitter"]
    assert (spec.checkpoint.records, spec.checkpoint.bytes, spec.command_timeout) == (500, 65536, 2.0)
    assert "greater than or equal to 1" in problem(BASE + "    checkpoint: {records: 0}\n")


def test_validate_finds_the_program_relative_to_the_pipeline_file(tmp_path: Path) -> None:
    relative = BASE.replace('[jq, --unbuffered, -c, "[{value: .value}]"]', "[./split.sh]")
    path = tmp_path / "p.yaml"
    path.write_text(relative)
    missing = problem(relative, import_classes=True, file=str(path))
    assert "processors.splitter.command" in missing and "`./split.sh` not found" in missing
    (tmp_path / "split.sh").write_text("#!/bin/sh\nexec cat\n")
    not_executable = problem(relative, import_classes=True, file=str(path))
    assert "is not executable" in not_executable and "chmod +x" in not_executable
    (tmp_path / "split.sh").chmod(0o755)
    assert load_pipeline(path, import_classes=True).processors["splitter"].command == ("./split.sh",)
    on_path = problem(BASE.replace("[jq,", "[no-such-program-here,"), import_classes=True)
    assert "`no-such-program-here` is not on the PATH" in on_path


def test_the_wordcount_example_validates() -> None:
    assert shutil.which("jq"), "the example's splitter is jq"
    result = run_stylus("validate", str(ROOT / "pipelines" / "wordcount.yaml"))
    assert result.returncode == 0, result.stderr
    assert "splitter: command: ../processors/split.sh" in result.stdout
