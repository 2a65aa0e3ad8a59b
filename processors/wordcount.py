"""The Python half of Storm's word count (pipelines/wordcount.yaml): the executable splitter keys each word by
itself, so all of a word's records reach one partition and its count lives in that partition's state."""

from __future__ import annotations

from stylus import Context, Processor, Record


class WordCount(Processor):
    """Counts each key and emits the running count (docs/reference.md's Processor API example)."""

    def process(self, record: Record, ctx: Context) -> None:
        word = record.key or ""  # the splitter keys every word by itself
        n = (ctx.state.get(word) or 0) + 1
        ctx.state[word] = n
        ctx.emit({"word": word, "count": n}, key=word)
