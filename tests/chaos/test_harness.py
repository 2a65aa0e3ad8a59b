"""The chaos harness's own judgement (tests/chaos/harness.py), where it is more than a comparison."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stylus.kafka.reader import read_topic
from tests.chaos.harness import FAULTS, WORKLOADS, ci_sample, combo_of, long_run_order, resent_copies
from tests.support.kafka import produce


def test_the_later_copy_of_a_record_the_broker_holds_twice_is_told_apart(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """An idempotent producer's retry across an unclean broker restart can be written again (chaos seed
    3240000309: 451 input records twice); only the later copies may rightly be dropped as late."""
    topic = topic_factory("resent", partitions=1)
    produce(bootstrap, topic, [("k", {"k": "k", "i": i}) for i in [*range(10), 3, 4, 5, 10]])
    inputs = read_topic(bootstrap, topic)
    assert resent_copies(inputs) == {f"{topic}:0:10", f"{topic}:0:11", f"{topic}:0:12"}


def test_the_ci_sample_runs_every_workload_and_every_fault_in_each_round() -> None:
    seeds = ci_sample(3)
    assert len(seeds) == 2 * len(WORKLOADS)
    for round_ in (seeds[:len(WORKLOADS)], seeds[len(WORKLOADS):]):
        combos = [combo_of(s) for s in round_]
        assert [c.workload for c in combos] == list(WORKLOADS)
        assert {c.fault for c in combos} == set(FAULTS)


def test_the_long_run_covers_the_cells_of_the_workloads_asked_for_and_refuses_others() -> None:
    seeds = long_run_order(7, 3 * len(FAULTS), ("batch",))
    combos = [combo_of(s) for s in seeds]
    assert {c.workload for c in combos} == {"batch"}
    assert {c.fault for c in combos} == set(FAULTS)
    assert len({c.pair for c in combos}) > 1  # a cell's pair changes from round to round
    assert {combo_of(s).workload for s in long_run_order(7, 2 * len(WORKLOADS) * len(FAULTS))} == set(WORKLOADS)
    with pytest.raises(ValueError, match="choose from"):
        long_run_order(7, 5, ("batch", "nope"))
