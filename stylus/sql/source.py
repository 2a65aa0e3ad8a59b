"""The text of a SQL app and the way back from a character offset to its line and column.

The Puma clauses sqlglot does not know (`CREATE APPLICATION`, `FROM KAFKA(...) TIME col`, `[5 minutes]`) are
taken out by blanking them with spaces (`blanked`), never by deleting: every offset sqlglot reports in the
rewritten text is the same offset in the file, so the map back is the identity plus `position`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable


class SqlSource:
    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.file = file
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column) of a 0-based character offset, both 1-based."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def offset(self, line: int, column: int) -> int:
        """The inverse of `position` (sqlglot reports parse errors by line and column)."""
        line = max(1, min(line, len(self._line_starts)))
        return self._line_starts[line - 1] + max(column, 1) - 1

    def blanked(self, keep: tuple[int, int], drop: Iterable[tuple[int, int]] = ()) -> str:
        """The text with everything outside `keep` (start, end) and inside each `drop` span replaced by spaces,
        newlines kept: the same length, so offsets, lines and columns are unchanged."""
        chars = list(self.text)
        start, end = keep
        spans = [(0, start), (end, len(chars)), *drop]
        for a, b in spans:
            for i in range(a, b):
                if chars[i] != "\n":
                    chars[i] = " "
        return "".join(chars)
