"""Checkpoint orderings: which of the three steps (state, offsets, output) happens first decides the
processor's semantics. The numbered contract and its crash cases are in docs/semantics.md.

Each ordering is data (a tuple of steps), so a test can build a wrong one and watch it fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Step(StrEnum):
    EMIT = "emit"  # release held output, then wait until the broker acknowledged all of it
    STATE = "state"  # write buffered state (and timers) to RocksDB
    OFFSETS = "offsets"  # write the next input offsets to RocksDB, then commit them to Kafka
    STATE_AND_OFFSETS = "state+offsets"  # both in one RocksDB write batch, then commit to Kafka
    TRANSACTION = "transaction"  # outputs and offsets in one Kafka transaction; state staged around it


@dataclass(frozen=True)
class Ordering:
    name: str
    steps: tuple[Step, ...]

    @property
    def holds_output(self) -> bool:
        """Output waits in memory when it must not reach Kafka before the checkpoint is saved."""
        if Step.EMIT not in self.steps:
            return False
        emit_at = self.steps.index(Step.EMIT)
        return any(s in self.steps[:emit_at] for s in (Step.OFFSETS, Step.STATE_AND_OFFSETS))

    @property
    def transactional(self) -> bool:
        return Step.TRANSACTION in self.steps


S, O, SO, E, T = Step.STATE, Step.OFFSETS, Step.STATE_AND_OFFSETS, Step.EMIT, Step.TRANSACTION

ORDERINGS: dict[tuple[str | None, str], Ordering] = {
    ("at_least_once", "at_least_once"): Ordering("at-least-once state, at-least-once output", (E, S, O)),
    ("exactly_once", "at_least_once"): Ordering("exactly-once state, at-least-once output", (E, SO)),
    ("at_most_once", "at_most_once"): Ordering("at-most-once state, at-most-once output", (O, S, E)),
    ("exactly_once", "at_most_once"): Ordering("exactly-once state, at-most-once output", (SO, E)),
    ("exactly_once", "exactly_once"): Ordering("exactly-once state, exactly-once output", (T,)),
    (None, "at_least_once"): Ordering("stateless, at-least-once output", (E, O)),
    (None, "at_most_once"): Ordering("stateless, at-most-once output", (O, E)),
    (None, "exactly_once"): Ordering("stateless, exactly-once output", (T,)),
}


def ordering_for(state: str | None, output: str) -> Ordering:
    return ORDERINGS[(state, output)]
