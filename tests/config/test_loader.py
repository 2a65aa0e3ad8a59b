"""Bad YAML gets an error naming the file, the path inside it (with its line) and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from stylus.config import PipelineError, load_pipeline, parse_duration, parse_pipeline

GOOD = """\
pipeline: demo
topics:
  events: {partitions: 4}
  counts: {partitions: 4, serde: json}
processors:
  counter:
    class: tests.apps.counting:WordCount
    inputs: [events]
    outputs: [counts]
    semantics: {state: exactly_once, output: exactly_once}
    checkpoint: {interval: 500ms}
"""


def errors_of(text: str, *, import_classes: bool = False, environ: dict[str, str] | None = None) -> PipelineError:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text, file="p.yaml", import_classes=import_classes, environ=environ or {})
    return info.value


def test_good_pipeline_parses_with_defaults() -> None:
    p = parse_pipeline(GOOD, file="p.yaml", import_classes=True)
    spec = p.processors["counter"]
    assert spec.checkpoint.interval == 0.5
    assert spec.semantics.pair == ("exactly_once", "exactly_once")
    assert spec.stateful and spec.on_error == "dead_letter" and spec.replicas == 1
    assert p.group_id("counter") == "demo.counter"
    assert p.dlq_topic("counter") == "demo.counter.dlq"


@pytest.mark.parametrize(
    ("mutate", "path", "message", "fix"),
    [
        # 1. an invalid semantics pair names the rule
        (lambda t: t.replace("{state: exactly_once, output: exactly_once}",
                             "{state: at_most_once, output: exactly_once}"),
         "processors.counter.semantics", "not a valid pair (the paper's Figure 8)", "use one of"),
        # 2. an unknown topic, with a suggestion
        (lambda t: t.replace("inputs: [events]", "inputs: [event]"),
         "processors.counter.inputs.0", "topic `event` is not declared", "did you mean `events`?"),
        # 3. a misspelt key, with a suggestion and the allowed keys
        (lambda t: t.replace("checkpoint:", "checkpont:"),
         "processors.counter.checkpont", "unknown key `checkpont`", "did you mean `checkpoint`?"),
        # 4. a bad duration
        (lambda t: t.replace("500ms", "half a second"),
         "processors.counter.checkpoint.interval", "is not a duration", "'500ms'"),
        # 5. a missing required field
        (lambda t: t.replace("    class: tests.apps.counting:WordCount\n", ""),
         "processors.counter", "either `class` (a Python processor) or `command`", "keep one of `class:"),
        # 6. a bad serde
        (lambda t: t.replace("serde: json", "serde: avro"),
         "topics.counts.serde", "Input should be", "use one of 'json', 'string' or 'bytes'"),
        # 7. a duplicate processor name (YAML would silently keep the last one)
        (lambda t: t + "  counter:\n    class: a.b:C\n    inputs: [events]\n",
         "processors.counter", "`counter` is defined twice", "give each entry its own name"),
        # 8. a class path that is not module:Class
        (lambda t: t.replace("tests.apps.counting:WordCount", "tests.apps.counting.WordCount"),
         "processors.counter.class", "String should match pattern", "package.module:ClassName"),
        # 9. partitions out of range
        (lambda t: t.replace("events: {partitions: 4}", "events: {partitions: 0}"),
         "topics.events.partitions", "greater than or equal to 1", "valid value"),
        # 10. reading and writing the same topic
        (lambda t: t.replace("outputs: [counts]", "outputs: [events]"),
         "processors.counter.outputs", "a loop onto itself", "write to a different topic"),
        # 11. a missing environment variable
        (lambda t: t.replace("pipeline: demo", "pipeline: ${PIPE_NAME}"),
         "(top level)", "environment variable PIPE_NAME is not set", "export PIPE_NAME=..."),
        # 12. not YAML at all
        (lambda t: t.replace("topics:", "topics: [unclosed"),
         "(top level)", "not valid YAML", "fix the YAML syntax"),
        # 13. an invalid pipeline name
        (lambda t: t.replace("pipeline: demo", "pipeline: 'my pipeline!'"),
         "pipeline", "String should match pattern", "letters, digits"),
        # 14. record ids chosen for output that is not exactly-once
        (lambda t: t.replace("{state: exactly_once, output: exactly_once}",
                             "{state: exactly_once, output: at_least_once, output_ids: never}"),
         "processors.counter.semantics", "output_ids applies to exactly-once output only",
         "remove `output_ids`, or set `output: exactly_once`"),
    ],
    ids=["pair", "unknown-topic", "typo-key", "duration", "missing", "serde", "duplicate", "class-path",
         "partitions", "self-loop", "env", "syntax", "name", "output-ids"],
)
def test_bad_yaml_names_file_path_and_fix(mutate, path: str, message: str, fix: str) -> None:
    error = errors_of(mutate(GOOD))
    text = str(error)
    assert text.startswith("p.yaml"), text
    assert f": {path}: " in text, text
    assert message in text, text
    assert "fix: " in text and fix in text, text


def test_errors_carry_the_line_number() -> None:
    text = str(errors_of(GOOD.replace("inputs: [events]", "inputs: [nope]")))
    assert text.startswith("p.yaml:8: processors.counter.inputs.0"), text


def test_cycle_is_reported() -> None:
    text = GOOD.replace("outputs: [counts]", "outputs: [counts]\n") + (
        "  back:\n    class: tests.apps.counting:Passthrough\n    inputs: [counts]\n    outputs: [events]\n")
    error = str(errors_of(text))
    assert "the processors form a cycle" in error and "counter -> back -> counter" in error


def test_processor_class_must_import_and_be_a_processor() -> None:
    missing = errors_of(GOOD.replace("tests.apps.counting:WordCount", "tests.apps.nope:X"), import_classes=True)
    assert "processors.counter.class" in str(missing) and "cannot be imported" in str(missing)
    not_a_processor = errors_of(GOOD.replace("tests.apps.counting:WordCount", "pathlib:Path"), import_classes=True)
    assert "is not a Processor subclass" in str(not_a_processor)
    absent = errors_of(GOOD.replace("WordCount", "WordCounter"), import_classes=True)
    assert "has no `WordCounter`" in str(absent) and "WordCount" in str(absent).split("fix:")[1]


def test_every_problem_is_listed_at_once() -> None:
    text = GOOD.replace("inputs: [events]", "inputs: [a]").replace("outputs: [counts]", "outputs: [b]")
    assert len(errors_of(text).problems) == 2


def test_env_expansion_with_defaults() -> None:
    text = GOOD.replace("pipeline: demo", "pipeline: ${NAME:-fallback}").replace("500ms", "${EVERY}")
    p = parse_pipeline(text, environ={"EVERY": "3s"})
    assert p.pipeline == "fallback" and p.processors["counter"].checkpoint.interval == 3.0


def test_stateless_processor_and_valid_pairs() -> None:
    p = parse_pipeline(GOOD.replace("{state: exactly_once, output: exactly_once}", "{output: at_most_once}"))
    assert not p.processors["counter"].stateful
    for state, output in [("at_least_once", "at_least_once"), ("exactly_once", "at_least_once"),
                          ("at_most_once", "at_most_once"), ("exactly_once", "at_most_once")]:
        parse_pipeline(GOOD.replace("state: exactly_once, output: exactly_once", f"state: {state}, output: {output}"))


def test_durations() -> None:
    assert [parse_duration(v) for v in ("500ms", "2s", "5m", "1h", "1d", 3)] == [0.5, 2, 300, 3600, 86400, 3]
    with pytest.raises(ValueError):
        parse_duration("-1s")


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(PipelineError) as info:
        load_pipeline(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(info.value) and "cannot read the file" in str(info.value)
    big = tmp_path / "big.yaml"
    big.write_text("#" * (1 << 20 + 1))
    with pytest.raises(PipelineError, match="the limit is"):
        load_pipeline(big)


def test_the_shipped_pipelines_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "pipelines"
    files = sorted(root.glob("*.yaml"))
    assert files
    for path in files:
        load_pipeline(path, import_classes=True)
