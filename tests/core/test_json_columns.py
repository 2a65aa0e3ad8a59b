"""The C decoder of JSON objects into columns (stylus/core/batch/json_columns.py) against orjson: it takes a run
only when orjson accepts every value, and then builds exactly the batch orjson's objects build."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from stylus.core.batch import json_columns
from stylus.core.batch.columns import Decoded, Run, decode_values, record_batch
from stylus.core.message import RawMessage

NAMES = ["id", "type", "v", "key", "é", "a\"b", ""]
NUMBER = r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?\Z"

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                    st.from_regex(NUMBER).map(lambda text: Raw(text)))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES),
                                                                                         inner, max_size=3),
                      max_leaves=6)


def test_the_module_is_built() -> None:
    assert json_columns.available(), "`make install` builds it (scripts/build-native.sh)"


class Raw(str):
    """JSON text written into a document as it is (a number spelled any way the grammar allows)."""


def write(value: Any, ascii_only: bool, space: str) -> str:
    """JSON text of `value`: escaped or not, spaced or not, a `Raw` as it is."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + f",{space}".join(f"{json.dumps(k, ensure_ascii=ascii_only)}{space}:{space}"
                                      f"{write(v, ascii_only, space)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(write(v, ascii_only, space) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def documents(draw: st.DrawFn) -> bytes | None:
    """A record's value: usually a JSON object, sometimes with a field twice, a byte changed, or null."""
    if draw(st.integers(0, 9)) == 0:
        return None
    fields = draw(st.lists(st.tuples(st.sampled_from(NAMES), values), max_size=5))
    space = draw(st.sampled_from(["", " ", "\n\t "]))
    ascii_only = draw(st.booleans())
    text = "{" + f",{space}".join(f"{json.dumps(k, ensure_ascii=ascii_only)}:{space}{write(v, ascii_only, space)}"
                                  for k, v in fields) + "}" + draw(st.sampled_from(["", " ", "\n"]))
    raw = text.encode("utf-8", "surrogatepass")
    if raw and draw(st.integers(0, 4)) == 0:  # a byte changed: often JSON no more, or not UTF-8
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    return raw


def orjson_batch(run: Run, rows: range | None, fields: tuple[str, ...] | None) -> pa.RecordBatch:
    """The batch of the run decoded by orjson, as without the C module."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(json_columns, "_json_columns", None)
        decoded, failed = decode_values(run.values, "json", fields)
    assert not failed
    return record_batch(run, rows, decoded, "json", fields)


def same(left: pa.RecordBatch, right: pa.RecordBatch) -> None:
    """Equal batches, floats to the bit (-0.0 is not 0.0)."""
    assert left.schema == right.schema
    for name in left.schema.names:
        a, b = left.column(name), right.column(name)
        assert orjson.dumps(a.to_pylist(), option=orjson.OPT_NON_STR_KEYS) == \
            orjson.dumps(b.to_pylist(), option=orjson.OPT_NON_STR_KEYS), name


def run_of(raws: list[bytes | None]) -> Run:
    return Run([RawMessage("t", 0, i, b"k", raw, 1000 + i, None) for i, raw in enumerate(raws)])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raws=st.lists(documents(), min_size=1, max_size=6), fields=st.none() | st.lists(
    st.sampled_from(NAMES), unique=True).map(tuple), cut=st.integers(0, 5))
@example(raws=[b'{"v": 1, "v": "x"}'], fields=None, cut=0)
@example(raws=[b'{"a\\u00e9": "\\ud83d\\ude00"}', None], fields=None, cut=0)
@example(raws=[b'{"v": 18446744073709551616}'], fields=("v",), cut=0)
@example(raws=[b'{"v": 1e-400, "w": -0.0}'], fields=None, cut=0)
@example(raws=[b'{"v": "\\ud800"}'], fields=None, cut=0)
def test_a_run_it_takes_is_the_batch_orjson_builds(raws: list[bytes | None], fields: tuple[str, ...] | None,
                                                   cut: int) -> None:
    taken = json_columns.decode(raws, fields)
    accepted = True
    for raw in raws:
        try:
            accepted &= raw is None or type(orjson.loads(raw)) is dict
        except orjson.JSONDecodeError:
            accepted = False
    event("taken by the C decoder" if taken is not None else "left to orjson")
    if taken is None:
        return
    event(f"columns left to orjson: {sum(array is None for array in taken[1])}")
    assert accepted, f"the C decoder took {raws!r}, which orjson refuses or reads as no object"
    run = run_of(raws)
    decoded, failed = decode_values(run.values, "json", fields)
    if fields == ():  # no column wanted: the values are read as objects (`ctx.values`), decoded by orjson at once
        assert type(decoded) is list and not failed
        return
    assert isinstance(decoded, Decoded) and not failed
    same(record_batch(run, None, decoded, "json", fields), orjson_batch(run, None, fields))
    rows = range(min(cut, len(raws) - 1), len(raws))  # a later segment of the run, as a split run has
    same(record_batch(run, rows, decoded, "json", fields), orjson_batch(run, rows, fields))
    assert decoded.objects() == [None if raw is None else orjson.loads(raw) for raw in raws]


def test_plain_records_are_decoded_in_c_column_by_column() -> None:
    """The common run (flat objects, one kind a field, a tombstone) is all C: no column left to orjson."""
    raws: list[bytes | None] = [orjson.dumps({"id": i, "type": "click", "v": i / 7, "ok": i % 2 == 0, "s": "é\n\"",
                                              "n": None}) for i in range(50)]
    raws[7] = None
    names, arrays = json_columns.decode(raws, None) or ([], [])
    assert names == ["id", "type", "v", "ok", "s", "n"]
    assert all(array is not None for array in arrays)
    assert [a.type for a in arrays if a is not None] == [pa.int64(), pa.string(), pa.float64(), pa.bool_(),
                                                         pa.string(), pa.null()]
    assert arrays[2] is not None and arrays[2].null_count == 1 and arrays[2][8].as_py() == 8 / 7


@pytest.mark.parametrize("raw", [
    b"[1]", b'"text"', b"null", b"", b"\xef\xbb\xbf{}", b'{"a":1,}', b'{"a":NaN}', b'{"a":01}', b'{"a":1.}',
    b'{"a":1e400}', b'{"a":"\x01"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\\udc00"}', b'{"a":"\\x"}', b"{}\x00",
    b'{"a":' + b"[" * 100 + b"]" * 100 + b"}", b'{"a":123456789012345678901234}',
])
def test_a_value_it_does_not_vouch_for_leaves_the_run_to_orjson(raw: bytes) -> None:
    assert json_columns.decode([orjson.dumps({"a": 1}), raw], None) is None


def test_a_column_of_mixed_kinds_is_left_to_orjson() -> None:
    names, arrays = json_columns.decode([b'{"a": 1, "b": 1}', b'{"a": "x", "b": 2}', b'{"a": [1], "b": 3}'],
                                        None) or ([], [])
    assert names == ["a", "b"] and arrays[0] is None and arrays[1] is not None


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.from_regex(NUMBER), min_size=1, max_size=20))
@example(["0.1", "2.2250738585072011e-308", "4.9e-324", "1.7976931348623157e308", "-0.0", "9007199254740993.0"])
@example(["9223372036854775807", "-9223372036854775808", "-0", "0"])
@example(["9007199254740992.0", "9007199254740993.0", "1e22", "1e23", "0.000000000000000000000001", "1.0e-22",
          "123456789012345678901234.5", "1.00000000000000000000001", "0.30000000000000004", "1e308", "9.9e307"])
@example(["1e309"])
@example(["999999999999999999999e288"])
def test_numbers_are_read_to_the_bit_as_orjson_reads_them(numbers: list[str]) -> None:
    """Read (a column of them) and passed over (another field's): the same numbers taken or refused."""
    raws: list[bytes | None] = [b'{"v": %s}' % n.encode() for n in numbers]
    taken = json_columns.decode(raws, ("v",))
    passed_over = json_columns.decode(raws, ("w",))
    beyond_int64 = any(n.lstrip("-").isdigit() and not -2**63 <= int(n) < 2**63 for n in numbers)
    try:
        expected = [orjson.loads(raw)["v"] for raw in raws if raw is not None]
    except orjson.JSONDecodeError:
        assert taken is None and passed_over is None
        return
    assert (passed_over is None) == beyond_int64
    if taken is None:  # an integer beyond int64 (orjson: a larger int, or a float): not vouched for
        assert beyond_int64
        return
    (array,) = taken[1]
    if len({type(v) for v in expected}) > 1:
        assert array is None
        return
    assert array is not None
    assert orjson.dumps(array.to_pylist()) == orjson.dumps(expected)


ARROW_TYPES = {
    "int64": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
    "float64": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    "string": (pa.string(), st.text()),
    "bool": (pa.bool_(), st.booleans()),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "float32": (pa.float32(), st.floats(width=32)),
    "list": (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
    "struct": (pa.struct([("a", pa.string()), ("b", pa.float64())]),
               st.fixed_dictionaries({"a": st.none() | st.text(max_size=3), "b": st.none() | st.floats()})),
    "large_string": (pa.large_string(), st.text(max_size=5)),
    "dictionary": (pa.dictionary(pa.int32(), pa.string()), st.sampled_from(["x", "y\n"])),
}


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    """A table of a few columns of the types a batch holds (some with nulls), sliced or not."""
    rows = draw(st.integers(0, 8))
    names = draw(st.lists(st.text(max_size=4), min_size=0, max_size=4, unique=True))
    columns = {}
    for name in names:
        kind = draw(st.sampled_from([*ARROW_TYPES, "null"]))
        if kind == "null":
            columns[name] = pa.nulls(rows)
            continue
        type_, items = ARROW_TYPES[kind]
        values = draw(st.lists(st.none() | items if draw(st.booleans()) else items, min_size=rows, max_size=rows))
        columns[name] = pa.array(values, type_)
    table = pa.table(columns) if columns else pa.table({"x": pa.nulls(rows)}).drop_columns(["x"])
    cut = draw(st.integers(0, rows))
    return table.slice(cut) if draw(st.booleans()) else table


@settings(max_examples=400, deadline=None)
@given(tables())
@example(pa.table({"s": pa.array(["".join(map(chr, range(0x21))), "\x7f/\\\"é\u2028\U0001F600"]),
                   "f": pa.array([5e-324, -0.0]), "i": pa.array([-2**63, 2**63 - 1])}))
def test_rows_are_written_byte_for_byte_as_orjson_writes_them(table: pa.Table) -> None:
    columns = [column.combine_chunks() for column in table.columns]
    encoded = json_columns.encode(columns, table.column_names, table.num_rows)
    assert encoded is not None
    values, total = encoded
    expected = [orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS) for row in table.to_pylist()]
    assert values == expected and total == sum(map(len, expected))


def test_a_column_orjson_cannot_write_is_left_to_the_caller() -> None:
    column = pa.array([1, 2], pa.decimal128(5, 2))  # orjson writes no Decimal: Polars or an error decides
    assert json_columns.encode([column], ["d"], 2) is None


def test_buffers_shorter_than_the_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="fewer than 5 rows"):
        json_columns._json_columns.encode([b'"i"'], [("int64", None, pa.py_buffer(b"\0" * 16), 0)], 5)
    with pytest.raises(ValueError, match="not a JSON array of 3 values"):
        json_columns._json_columns.encode([b'"t"'], [("text", b"[1,2]")], 3)


def test_decoded_values_are_made_by_orjson_only_when_read() -> None:
    raws: list[bytes | None] = [b'{"a": 1}', None, b'{"a": 2.5, "b": [1]}']
    decoded, _ = decode_values(raws, "json", None)
    assert isinstance(decoded, Decoded) and decoded._objects is None
    assert decoded[2] == {"a": 2.5, "b": [1]} and decoded[1] is None and decoded._objects is None  # one by one
    assert decoded[0:2] == [{"a": 1}, None] and decoded.objects() == [{"a": 1}, None, {"a": 2.5, "b": [1]}]
