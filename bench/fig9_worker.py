"""Figure 9's processor as a Swift-style executable (docs/executable.md): bench.semantics:HeavyDecode's work over pipes.

    python bench/fig9_worker.py < lines

Reads one JSON line per input record (`key`, `value`, `timestamp`, `topic`, `partition`, `offset`), decodes
it (the 4 KB value: most of the work), sums the items' `v`, counts the key and answers each line with exactly
one line, `[{"value": {"id", "total", "n"}, "key": key}]`: HeavyDecode's output. The count is kept in memory
(a command processor has no state store), HeavyDecode's in RocksDB. It decodes with orjson, the library of
Stylus's json serde, so run it with an interpreter that has orjson (bench.semantics uses its own).

It answers everything it has read before it blocks on reading again: one read of what the pipe holds, one
write of all their answers. That flushes every answer before waiting for input (no stall, see "What a
program must do") with a system call per pipe buffer rather than per record.
"""

from __future__ import annotations

import os

import orjson


def main() -> None:
    counts: dict[str, int] = {}
    rest = b""
    while chunk := os.read(0, 1 << 16):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()  # an incomplete last line waits for the rest of it
        answers = []
        for line in lines:
            record = orjson.loads(line)
            doc, key = record["value"], record["key"]
            total = sum(item["v"] for item in doc["items"])
            n = counts[key or ""] = counts.get(key or "", 0) + 1
            answers.append(orjson.dumps([{"value": {"id": doc["id"], "total": total, "n": n}, "key": key}]))
        if answers:
            out = memoryview(b"\n".join(answers) + b"\n")
            while out:
                out = out[os.write(1, out):]


if __name__ == "__main__":
    main()
