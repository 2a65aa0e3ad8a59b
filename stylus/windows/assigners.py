"""Which windows an event time falls in. Windows are [start, end) in ms, aligned to the epoch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tumbling:
    size: int

    def ends(self, t: int) -> tuple[int, ...]:
        return (t - t % self.size + self.size,)

    def last_end(self, t: int) -> int:
        return t - t % self.size + self.size

    def start(self, end: int) -> int:
        return end - self.size


@dataclass(frozen=True)
class Hopping:
    """Windows of `size` every `slide` (a sliding window evaluated every `slide`)."""

    size: int
    slide: int

    def __post_init__(self) -> None:
        if self.slide <= 0 or self.size < self.slide:
            raise ValueError("a hopping window needs 0 < slide <= size")

    def ends(self, t: int) -> tuple[int, ...]:
        first = t - t % self.slide + self.slide
        return tuple(range(first, t + self.size + 1, self.slide))

    def last_end(self, t: int) -> int:
        first = t - t % self.slide + self.slide
        return first + (t + self.size - first) // self.slide * self.slide

    def start(self, end: int) -> int:
        return end - self.size


@dataclass(frozen=True)
class Session:
    """Per key, events closer than `gap` to each other form one window [first, last + gap)."""

    gap: int

    def last_end(self, t: int) -> int:
        return t + self.gap
