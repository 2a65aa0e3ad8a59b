"""Storm's groupings on a processor's outputs, as the YAML writes them (docs/groupings.md).

`outputs: [words, {topic: control, grouping: all}]`: a plain name keeps the default (by key, Storm's fields
grouping; shuffled without a key). The mapping form is split off here so `ProcessorSpec.outputs` stays a
tuple of topic names for every reader of it, and the groupings live apart in `ProcessorSpec.groupings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

#: groupings other than the default; `key` (the default) is accepted in YAML and not stored
Grouping = Literal["all", "global"]
DEFAULT = "key"
#: what each name means, for errors and docs
MEANINGS: dict[str, str] = {
    "key": "the default: by key, spread without one",
    "all": "every partition gets a copy",
    "global": "always partition 0",
}
_KEYS = ("topic", "grouping")


def _fix() -> str:
    names = ", ".join(f"`grouping: {name}` ({meaning})" for name, meaning in MEANINGS.items())
    return (f"use {names}, or write the topic name alone for the default; to choose a partition per record, "
            "call `ctx.emit(..., partition=n)`")


def _output_name(item: Any) -> Any:
    """An output as written: a topic name, or `{topic, grouping}`, checked here; its name is kept."""
    from stylus.config.model import FixableError  # the model imports this module

    if not isinstance(item, Mapping):
        return item  # a name (or a wrong type, which the str check reports)
    unknown = sorted(str(k) for k in item if k not in _KEYS)
    if unknown:
        raise FixableError(f"unknown key {', '.join(f'`{k}`' for k in unknown)} in an output",
                           "an output is a topic name or `{topic: NAME, grouping: all|global|key}`")
    topic = item.get("topic")
    if not isinstance(topic, str) or not topic:
        raise FixableError("an output written as a mapping needs `topic`",
                           "write `{topic: NAME, grouping: all}` (or the topic name alone)")
    grouping = item.get("grouping", DEFAULT)
    if grouping not in MEANINGS:
        raise FixableError(f"`grouping: {grouping}` on output `{topic}` is not a grouping", _fix())
    return topic


#: a topic name in `outputs`, also accepted as `{topic: NAME, grouping: ...}`
OutputName = Annotated[str, BeforeValidator(_output_name)]


def groupings_from(data: Any) -> Any:
    """A processor's raw YAML with the groupings of `outputs` copied into `groupings` (non-default ones only);
    the outputs themselves are checked and reduced to names by `OutputName`."""
    if not isinstance(data, Mapping):
        return data
    outputs = data.get("outputs")
    if not isinstance(outputs, list | tuple):
        return data
    found = {item["topic"]: item["grouping"] for item in outputs
             if isinstance(item, Mapping) and isinstance(item.get("topic"), str)
             and item.get("grouping", DEFAULT) in MEANINGS and item.get("grouping", DEFAULT) != DEFAULT}
    if not found:
        return data
    explicit = data.get("groupings")
    merged = {**explicit, **found} if isinstance(explicit, Mapping) else found
    return {**data, "groupings": merged}
