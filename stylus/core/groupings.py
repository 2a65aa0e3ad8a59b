"""Which partitions an emitted record goes to, beside the producer's own choice (by key, or spread).

Storm's groupings (docs/groupings.md): an output declared `grouping: all` gets a copy in every partition,
`grouping: global` goes to partition 0, and `ctx.emit(..., partition=n)` (direct) picks one and wins over
the output's grouping. The engine asks only when an emit names a partition or the processor has grouped
outputs, so the default path costs nothing more.
"""

from __future__ import annotations

from stylus.config.model import Pipeline, ProcessorSpec


class Routes:
    """The grouped outputs of one processor and the partition counts that bound `partition=n`."""

    __slots__ = ("fixed", "widths")

    def __init__(self, pipeline: Pipeline, spec: ProcessorSpec) -> None:
        # as declared in the YAML: `stylus topics create` / `stylus run` create them so
        self.widths = {t: pipeline.topics[t].partitions for t in spec.outputs if t in pipeline.topics}
        self.fixed: dict[str, tuple[int, ...]] = {
            topic: tuple(range(self.widths.get(topic, 1))) if grouping == "all" else (0,)
            for topic, grouping in spec.groupings.items()
        }

    def __bool__(self) -> bool:
        return bool(self.fixed)

    def __contains__(self, topic: object) -> bool:
        return topic in self.fixed

    def partitions(self, topic: str, partition: int | None) -> tuple[int, ...] | None:
        """The partitions of one emit to `topic`, or None for the producer's choice. An impossible
        `partition` raises inside the record, so the processor's `on_error` policy handles it."""
        if partition is None:
            return self.fixed.get(topic)
        width = self.widths.get(topic)
        if type(partition) is not int:
            raise TypeError(f"emit(partition={partition!r}) to `{topic}`: the partition must be an int")
        if width is None or not 0 <= partition < width:
            raise ValueError(f"emit(partition={partition}) to `{topic}`, which has {width} partitions "
                             f"(0-{(width or 1) - 1}): emit to an existing partition, or add partitions to "
                             "the topic")
        return (partition,)

    def each(self, topic: str, partition: int | None = None) -> tuple[int, ...]:
        """For emitters outside the engine (a sink called directly): the `partition` argument of each sink
        call for one output, -1 being the producer's choice: `for p in routes.each(t): sink(..., partition=p)`."""
        return self.partitions(topic, partition) or (-1,)
