"""`outputs: [words, {topic: control, grouping: all}]`: the names stay `spec.outputs`, the groupings go to
`spec.groupings`, and a wrong one is an error naming the file, the path, the line and the fix."""

from __future__ import annotations

import pytest

from stylus.config import PipelineError, parse_pipeline

DOC = """\
pipeline: g
topics:
  sentences: {partitions: 2}
  words: {partitions: 4}
  control: {partitions: 3}
  totals: {partitions: 2}
processors:
  splitter:
    class: tests.apps.grouping:Router
    inputs: [sentences]
    outputs: OUTPUTS
    semantics: {output: at_least_once}
"""


def parse(outputs: str):  # type: ignore[no-untyped-def]
    return parse_pipeline(DOC.replace("OUTPUTS", outputs), file="p.yaml", environ={})


def problem(outputs: str):  # type: ignore[no-untyped-def]
    with pytest.raises(PipelineError) as info:
        parse(outputs)
    [found] = info.value.problems
    return found, str(info.value)


def test_mixed_outputs_keep_names_and_split_off_the_groupings() -> None:
    spec = parse("[words, {topic: control, grouping: all}, {topic: totals, grouping: global}]").processors["splitter"]
    assert spec.outputs == ("words", "control", "totals")  # a tuple of names, as everything reads it
    assert spec.groupings == {"control": "all", "totals": "global"}


def test_plain_names_and_grouping_key_keep_todays_behaviour() -> None:
    assert parse("[words, control]").processors["splitter"].groupings == {}
    spec = parse("[{topic: words, grouping: key}, {topic: control}]").processors["splitter"]
    assert spec.outputs == ("words", "control") and spec.groupings == {}


def test_an_unknown_grouping_names_the_place_and_the_fix() -> None:
    found, text = problem("[words, {topic: control, grouping: broadcast}]")
    assert found.path == "processors.splitter.outputs.1"
    assert found.line == 11
    assert "`grouping: broadcast` on output `control` is not a grouping" in found.message
    assert "`grouping: all`" in found.fix and "`grouping: global`" in found.fix
    assert "ctx.emit(..., partition=n)" in found.fix
    assert text.startswith("p.yaml:11: processors.splitter.outputs.1")


def test_a_malformed_output_mapping_says_what_an_output_is() -> None:
    found, _ = problem("[{topic: control, groupin: all}]")
    assert found.path == "processors.splitter.outputs.0" and "`groupin`" in found.message
    assert "{topic: NAME, grouping: all|global|key}" in found.fix
    found, _ = problem("[{grouping: all}]")
    assert "needs `topic`" in found.message


def test_a_grouped_output_must_still_be_a_declared_topic() -> None:
    found, _ = problem("[{topic: nowhere, grouping: all}]")
    assert found.path.startswith("processors.splitter.outputs") and "nowhere" in found.message


def test_groupings_may_only_name_outputs() -> None:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(DOC.replace("OUTPUTS", "[words]").replace("    semantics:", "    groupings: {control: all}\n"
                                                                 "    semantics:"), file="p.yaml", environ={})
    assert "not among the processor's outputs" in str(info.value)
