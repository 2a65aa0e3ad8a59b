"""Property tests of the YAML loader: any text or structure gives a Pipeline or a PipelineError that
names the file and says what to fix; never another exception, never a hang."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stylus.config import Pipeline, PipelineError, parse_pipeline

FILE = "fuzz.yaml"
FUZZ = settings(max_examples=250, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

VALID: dict[str, Any] = {
    "pipeline": "fz",
    "kafka": {"linger.ms": 5},
    "topics": {"a": {"partitions": 2}, "b": {"partitions": 1, "serde": "string"}},
    "processors": {
        "p": {"class": "tests.apps.counting:Passthrough", "inputs": ["a"], "outputs": ["b"],
              "semantics": {"state": "exactly_once", "output": "at_least_once"},
              "checkpoint": {"interval": "2s"}, "on_error": "skip",
              "event_time": {"field": "ts", "allowed_lateness": "30s"}},
    },
}

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
                    st.sampled_from(["2s", "-1s", "5m", "at_least_once", "exactly_once", "json", "x:Y", "${V}",
                                     "${V:-d}", "1e309", "0x1f", "2024-13-45", "~", "!!str"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=25)


def _check(text: str, **kwargs: Any) -> None:
    try:
        result = parse_pipeline(text, file=FILE, **kwargs)
    except PipelineError as exc:
        assert exc.file == FILE and exc.problems
        for problem in exc.problems:
            assert problem.message and problem.fix
        assert str(exc).startswith(FILE)
    else:
        assert isinstance(result, Pipeline)


def test_the_valid_document_loads() -> None:
    assert parse_pipeline(yaml.safe_dump(VALID), file=FILE).processors["p"].on_error == "skip"


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    _check(text, environ={})


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("[]{}:,-&*!|>'\"#%@`?\n\t abc01.$~")), max_size=200))
def test_yaml_punctuation_soup(text: str) -> None:
    _check(text, environ={"V": "v"})


@FUZZ
@given(values)
def test_arbitrary_structures(data: Any) -> None:
    _check(yaml.safe_dump(data), environ={})


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(VALID) if p]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
def test_mutations_of_a_valid_pipeline(mutations: list[tuple[tuple[Any, ...], Any]]) -> None:
    import copy

    doc = copy.deepcopy(VALID)
    for path, value in mutations:
        node: Any = doc
        try:
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    _check(yaml.safe_dump(doc), environ={}, import_classes=True)
