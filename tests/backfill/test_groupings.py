"""Backfill writes outputs with their groupings (docs/groupings.md): a backfill task's sink, `TopicOutput`,
under the task's engine, on the real broker; every partition read back. One grouped output takes the
engine's direct path, several take the sink's call; a shadow topic (`replay --shadow`) keeps the partitions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import orjson
import pytest

from stylus.backfill.outputs import TopicOutput
from stylus.core.engine import Engine, RaiseFailures
from stylus.core.message import RawMessage
from stylus.core.task import PartitionTask
from tests.apps.grouping import Router
from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw


def _where(bootstrap: str, topic: str) -> dict[int, list[int]]:
    found: dict[int, list[int]] = defaultdict(list)
    for msg in read_raw(bootstrap, topic):
        found[msg.partition()].append(orjson.loads(msg.value())["id"])
    return dict(found)


@pytest.mark.parametrize("shape", ["one_output", "several", "shadow"])
def test_a_backfill_task_writes_each_grouping_where_it_promises(bootstrap: str, pipeline_factory: PipelineFactory,
                                                                 topic_factory: Callable[..., str], shape: str) -> None:
    outputs: list[object] = [{"topic": "fan", "grouping": "all"}]
    if shape != "one_output":
        outputs += ["words", {"topic": "one", "grouping": "global"}]
    _, pipeline = pipeline_factory({
        "pipeline": "bfgrp",
        "topics": {"src": {"partitions": 1}, "fan": {"partitions": 3}, "words": {"partitions": 3},
                   "one": {"partitions": 2}},
        "processors": {"p": {"class": "tests.apps.grouping:Router", "inputs": ["src"], "outputs": outputs,
                             "semantics": {"output": "at_least_once"}}},
    })
    spec = pipeline.processors["p"]
    # as wide as the widest output, as `stylus replay` makes it (stylus/backfill/job.py `_prepare_output`)
    shadow = topic_factory("shadow", partitions=3) if shape == "shadow" else None
    output = TopicOutput(pipeline, "p", bootstrap, shadow)
    assert (output.direct() is not None) == (shape == "one_output")
    engine = Engine(Router(), "p", spec, pipeline, output, RaiseFailures())
    engine.atomic = False  # as a backfill task runs it (stylus/backfill/task.py)
    engine.start()
    fan = spec.outputs[0]
    values: list[dict[str, object]] = [{"id": 1}, {"id": 2, "topic": fan, "partition": 2}]
    if shape != "one_output":
        values += [{"id": 3, "topic": spec.outputs[1], "partition": 1}, {"id": 4, "topic": spec.outputs[2]}]
    msgs = [RawMessage(spec.inputs[0], 0, i, b"k", orjson.dumps(v), 1000 + i) for i, v in enumerate(values)]
    task = PartitionTask(spec.inputs[0], 0, None)
    engine.process_messages(msgs, lambda t, p: task)
    output.close()
    output.wait()
    if shadow is not None:  # everything in one topic: the partitions the outputs chose, ids in order
        assert _where(bootstrap, shadow) == {0: [1, 4], 1: [1, 3], 2: [1, 2]}
        return
    assert _where(bootstrap, fan) == {0: [1], 1: [1], 2: [1, 2]}
    if shape == "several":
        assert _where(bootstrap, spec.outputs[1]) == {1: [3]}
        assert _where(bootstrap, spec.outputs[2]) == {0: [4]}


def test_stylus_backfill_to_the_outputs_keeps_the_groupings(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    """The whole path: `stylus backfill --output @outputs` on Spark, the pipeline shipped to its tasks."""
    path, pipeline = pipeline_factory({
        "pipeline": "bfcli",
        "topics": {"src": {"partitions": 1}, "fan": {"partitions": 3}, "one": {"partitions": 2}},
        "processors": {"p": {"class": "tests.apps.grouping:Router", "inputs": ["src"],
                             "outputs": [{"topic": "fan", "grouping": "all"}, {"topic": "one", "grouping": "global"}],
                             "semantics": {"output": "at_least_once"}}},
    })
    spec = pipeline.processors["p"]
    fan, one = spec.outputs
    produce(bootstrap, spec.inputs[0], [("a", {"id": 1}), ("b", {"id": 2, "topic": one}),
                                        ("c", {"id": 3, "topic": one, "partition": 1})])
    done = run_stylus("backfill", str(path), "--processor", "p", "--output", "@outputs", "--no-progress",
                      "--master", "local[1]", bootstrap=bootstrap, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _where(bootstrap, fan) == {0: [1], 1: [1], 2: [1]}
    assert _where(bootstrap, one) == {0: [2], 1: [3]}
