"""Storm's acker for one input partition: which records' work is complete, and how far offsets may be committed.

Every input record whose work is not done at once gets an entry: a 64-bit value, the XOR of the ids of its
units of work still open. A unit is anything that runs on the record's behalf (its `process` call, each
awaitable handed to `ctx.defer`, each `then` callback); its id is a random 64-bit number, XORed into the
record's entry when the unit is created and XORed again when it is done. A record's work is complete when its
entry returns to 0: every unit created was done, whatever the shape of the tree and in whatever order its
units finished. Memory is one int per incomplete record, whatever the fan-out (Storm, "Guaranteeing message
processing": the chance that ids which are still open XOR to 0 by accident is 2^-64 per check).

Storm sends the ids of the units a unit created along with that unit's own ack (one message per ack); here the
acker lives in the worker's thread, so a new unit is XORed in as it is created (`add`) and the sum is the same.
The unit that creates children is still open while it does, so the entry never passes through 0 early.

`committable(next_offset)`: the lowest offset whose record is still incomplete, or `next_offset` when none
is; a checkpoint saves that, never more (stylus/core/task.py, `PartitionTask.checkpoint_offset`). Records
begin in increasing offset order, so the incomplete ones form a queue ordered by offset and the answer is
amortised O(1): records completed at the head are dropped as it is asked.

Kafka-free and single-threaded: the worker's thread owns it (docs/acker.md).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator


class PartitionAcker:
    __slots__ = ("_order", "_pending", "_random")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._pending: dict[int, int] = {}  # offset -> XOR of the ids of its open units (never 0)
        self._order: deque[int] = deque()  # offsets begun, in order; completed ones linger until at the head
        self._random = rng or random.Random()

    def new_id(self) -> int:
        """A unit id: random, 64 bits, never 0 (0 is "complete")."""
        unit = 0
        while not unit:
            unit = self._random.getrandbits(64)
        return unit

    def begin(self, offset: int) -> int:
        """An input record whose work starts now, with one open unit (its root): the root's id. Offsets must
        increase from one call to the next."""
        order = self._order
        if order and offset <= order[-1]:
            raise ValueError(f"offset {offset} begun after {order[-1]}: records begin in offset order")
        unit = self.new_id()
        self._pending[offset] = unit
        order.append(offset)
        return unit

    def add(self, offset: int) -> int:
        """A new unit in the tree of the record at `offset` (which must be incomplete): its id."""
        unit = self.new_id()
        self._pending[offset] ^= unit  # KeyError for a record that is complete or was never begun
        return unit

    def ack(self, offset: int, unit: int) -> bool:
        """Unit `unit` of the record at `offset` is done. True when that completes the record (its entry is
        gone then); a record already complete (dropped, restarted with other ids) is ignored: False."""
        pending = self._pending
        value = pending.get(offset)
        if value is None:
            return False
        value ^= unit
        if value:
            pending[offset] = value
            return False
        del pending[offset]
        return True

    def completes(self, offset: int, unit: int) -> bool:
        """Whether acking `unit` would complete the record (it is the last open unit), without acking it."""
        return self._pending.get(offset) == unit

    def restart(self, offset: int) -> int:
        """Forget every open unit of the record at `offset` (its work is being tried again): a new root's id.
        Acks of the old units no longer add up to anything (a stale ack may reopen nothing: the caller ignores
        units of attempts it gave up)."""
        if offset not in self._pending:
            raise KeyError(offset)
        unit = self.new_id()
        self._pending[offset] = unit
        return unit

    def done(self, offset: int) -> bool:
        """The record at `offset` is settled without its tree completing (dead-lettered or skipped): it no
        longer holds the committable offset back. False if it was not incomplete."""
        return self._pending.pop(offset, None) is not None

    def committable(self, next_offset: int | None) -> int | None:
        """The offset a checkpoint may save: the lowest incomplete record's, else `next_offset`."""
        order, pending = self._order, self._pending
        while order and order[0] not in pending:
            order.popleft()
        return order[0] if order else next_offset

    def __len__(self) -> int:
        """Incomplete records."""
        return len(self._pending)

    def __contains__(self, offset: object) -> bool:
        return offset in self._pending

    def incomplete(self) -> Iterator[int]:
        """The offsets of the incomplete records, lowest first."""
        pending = self._pending
        return (offset for offset in self._order if offset in pending)

    def clear(self) -> None:
        self._pending.clear()
        self._order.clear()
