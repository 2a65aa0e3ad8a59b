"""Small processors used by the tests."""

from __future__ import annotations

from stylus import Processor


class WordCount(Processor):
    """docs/reference.md's Processor API example: count per key, emit the running count."""

    def process(self, record, ctx):
        n = (ctx.state.get(record.key) or 0) + 1
        ctx.state[record.key] = n
        ctx.emit({"word": record.key, "count": n}, key=record.key)


class Passthrough(Processor):
    def process(self, record, ctx):
        ctx.emit(record.value, key=record.key)


class Failing(Processor):
    """Raises on records whose value has `"fail": true`."""

    def process(self, record, ctx):
        if isinstance(record.value, dict) and record.value.get("fail"):
            raise ValueError(f"bad record {record.value.get('id')}")
        ctx.emit(record.value, key=record.key)


class Padded(Processor):
    """Emits each record padded by its `pad` field: a big enough pad makes an output the producer refuses."""

    def process(self, record, ctx):
        ctx.emit({"id": record.value["id"], "pad": "x" * record.value.get("pad", 0)}, key=record.key)


class IntStateKey(Processor):
    """Writes state under an int key, which state refuses (keys are str)."""

    def process(self, record, ctx):
        ctx.state[len(record.key)] = 1
        ctx.emit(record.value, key=record.key)
