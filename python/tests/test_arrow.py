"""Writer.append_arrow: Arrow data of every fitting type from pyarrow (a record batch, a sliced
batch, a table of several chunks, a reader) reads back byte-exact, a null of a variable-length
field as an absent value; each misfit raises SchemaError naming the column and appends nothing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import zrecord

N = 5


def _columns() -> dict[str, tuple[object, pa.Array, list[bytes]]]:
    """Per field: its schema entry, a column of N rows, and each row's expected bytes."""
    out: dict[str, tuple[object, pa.Array, list[bytes]]] = {}
    for dtype, arrow in [
        ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
        ("u8", pa.uint8()), ("u16", pa.uint16()), ("u32", pa.uint32()), ("u64", pa.uint64()),
        ("f16", pa.float16()), ("f32", pa.float32()), ("f64", pa.float64()), ("bool", pa.bool_()),
    ]:
        np_dtype = {"f16": np.float16, "bool": np.bool_}.get(dtype, np.dtype(arrow.to_pandas_dtype()))
        values = (np.arange(N) * 37 % 5 + 1).astype(np_dtype)
        mask = np.array([False, True, False, False, False])  # row 1 is null
        col = pa.array(values, type=arrow, mask=mask)
        expected = [b"" if m else v.tobytes() for v, m in zip(values, mask)]
        out[dtype] = (dtype, col, expected)  # variable length: a null is an absent value
    out["label"] = (("u32", ()), pa.array([3, 1, 4, 1, 5], pa.uint32()), [np.uint32(v).tobytes() for v in [3, 1, 4, 1, 5]])
    emb = np.arange(N * 8, dtype=np.uint8).reshape(N, 8)
    out["emb"] = (("u8", (8,)), pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 8), [r.tobytes() for r in emb])
    grid = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    inner = pa.FixedSizeListArray.from_arrays(pa.array(grid.ravel()), 3)
    out["grid"] = (("f32", (2, 3)), pa.FixedSizeListArray.from_arrays(inner, 2), [r.tobytes() for r in grid])
    blobs = [b"one", None, b"", b"\x00\xff", b"five" * 10]
    caps = ["a cat", None, "", "ünïcødé", "x" * 40]
    blob_rows = [b or b"" for b in blobs]
    cap_rows = [(c or "").encode() for c in caps]
    out["binary"] = ("bytes", pa.array(blobs, pa.binary()), blob_rows)
    out["large_binary"] = ("bytes", pa.array(blobs, pa.large_binary()), blob_rows)
    out["utf8"] = ("bytes", pa.array(caps, pa.string()), cap_rows)
    out["large_utf8"] = ("bytes", pa.array(caps, pa.large_string()), cap_rows)
    out["binary_view"] = ("bytes", pa.array(blobs, pa.binary_view()), blob_rows)
    out["utf8_view"] = ("bytes", pa.array(caps, pa.string_view()), cap_rows)
    out["fixed_binary"] = ("bytes", pa.array([b"abc", b"def", None, b"ghi", b"jkl"], pa.binary(3)),
                           [b"abc", b"def", b"", b"ghi", b"jkl"])
    toks = [[1, 2, 3], None, [], [7], list(range(20))]
    out["tokens"] = ("i32", pa.array(toks, pa.list_(pa.int32())),
                     [np.array(t or [], np.int32).tobytes() for t in toks])
    out["large_tokens"] = ("u16", pa.array(toks, pa.large_list(pa.uint16())),
                           [np.array(t or [], np.uint16).tobytes() for t in toks])
    return out


def _write(path, cols, *batches):
    schema = {name: spec for name, (spec, _, _) in cols.items()}
    with zrecord.Writer.create(path, schema) as w:
        ranges = [w.append_arrow(b) for b in batches]
    return ranges


def _read(path, n):
    ds = zrecord.open(path)
    assert len(ds) == n
    return [{k: np.asarray(v).tobytes() for k, v in ds[i].items()} for i in range(n)]


def test_every_type_round_trips_from_a_record_batch_and_a_slice(tmp_path):
    cols = _columns()
    batch = pa.record_batch({name: col for name, (_, col, _) in cols.items()})
    sliced = batch.slice(2, 3)  # every buffer read from row 2 on (offsets != 0)
    assert _write(tmp_path / "ds", cols, batch, sliced) == [(0, N), (N, N + 3)]
    got = _read(tmp_path / "ds", N + 3)
    for i, row in enumerate(list(range(N)) + [2, 3, 4]):
        for name, (_, _, expected) in cols.items():
            assert got[i][name] == expected[row], (name, i, row)


def test_a_table_of_several_chunks_and_a_reader(tmp_path):
    cols = {k: v for k, v in _columns().items() if k in ("u32", "emb", "utf8", "tokens")}
    batch = pa.record_batch({name: col for name, (_, col, _) in cols.items()})
    table = pa.Table.from_batches([batch.slice(0, 2), batch.slice(2, 3), batch.slice(1, 1)])
    assert table.column("u32").num_chunks == 3
    reader = pa.RecordBatchReader.from_batches(batch.schema, iter([batch, batch.slice(4, 1)]))
    assert _write(tmp_path / "ds", cols, table, reader) == [(0, 6), (6, 12)]
    got = _read(tmp_path / "ds", 12)
    for i, row in enumerate([0, 1, 2, 3, 4, 1, 0, 1, 2, 3, 4, 4]):
        for name, (_, _, expected) in cols.items():
            assert got[i][name] == expected[row], (name, i, row)


def test_a_struct_array_is_a_batch(tmp_path):
    cols = {k: v for k, v in _columns().items() if k in ("i64", "binary")}
    st = pa.StructArray.from_arrays([c for _, c, _ in cols.values()], names=list(cols))
    assert _write(tmp_path / "ds", cols, st) == [(0, N)]
    got = _read(tmp_path / "ds", N)
    assert [g["binary"] for g in got] == cols["binary"][2]


def _refused(tmp_path, schema, data):
    with zrecord.Writer.create(tmp_path / "ds", schema) as w:
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_arrow(data)
        assert len(w) == 0
    return e.value


def test_misfits_raise_schema_error_naming_the_column(tmp_path):
    e = _refused(tmp_path, {"label": ("u32", ())}, pa.table({"label": pa.array([1], pa.int32())}))
    assert (e.column, e.field, e.arrow_type, e.dtype) == ("label", "label", "Int32", "u32 []")
    assert e.reason


@pytest.mark.parametrize(
    "schema,column,arrow_type",
    [
        ({"x": ("u8", (5,))}, pa.FixedSizeListArray.from_arrays(pa.array([1, 2, 3, 4], pa.uint8()), 4), "FixedSizeList(4 x UInt8)"),
        ({"x": "u32"}, pa.array(["a"]), "Utf8"),
        ({"x": ("bytes", (1,))}, pa.array([b"a"]), "Binary"),
        ({"x": "i32"}, pa.array([[[1]]], pa.list_(pa.list_(pa.int32()))), "List(List(Int32))"),
        ({"x": "bytes"}, pa.array(["a", "b"]).dictionary_encode(), "Dictionary(Int32, Utf8)"),
        ({"x": "bytes"}, pa.array([{"a": 1}]), None),
        ({"x": "i32"}, pa.array([1], pa.date32()), "Date32"),
    ],
)
def test_each_misfit_is_refused(tmp_path, schema, column, arrow_type):
    e = _refused(tmp_path, schema, pa.table({"x": column}))
    assert e.column == "x"
    if arrow_type is not None:
        assert e.arrow_type == arrow_type


def test_column_names_must_match_the_fields(tmp_path):
    schema = {"a": ("u32", ()), "b": ("u32", ())}
    e = _refused(tmp_path / "1", schema, pa.table({"a": pa.array([1], pa.uint32())}))
    assert (e.missing, e.extra, e.duplicated) == (["b"], [], [])
    one = pa.array([1], pa.uint32())
    e = _refused(tmp_path / "2", schema, pa.table({"a": one, "b": one, "c": one}))
    assert e.extra == ["c"]
    dup = pa.Table.from_arrays([one, one, one], names=["a", "b", "a"])
    e = _refused(tmp_path / "3", schema, dup)
    assert e.duplicated == ["a"]


def test_a_null_in_a_fixed_shape_field_names_its_row(tmp_path):
    e = _refused(tmp_path, {"label": ("u32", ())}, pa.table({"label": pa.array([1, None], pa.uint32())}))
    assert (e.column, e.row) == ("label", 1)


def test_a_null_item_inside_a_list_names_its_row(tmp_path):
    e = _refused(tmp_path, {"t": "i32"}, pa.table({"t": pa.array([[1], None, [2, None]], pa.list_(pa.int32()))}))
    assert (e.column, e.row) == ("t", 2)


def test_not_arrow_data_is_a_type_error(tmp_path):
    with zrecord.Writer.create(tmp_path / "ds", {"x": "u8"}) as w:
        with pytest.raises(TypeError):
            w.append_arrow({"x": [1, 2]})
        with pytest.raises(TypeError):
            w.append_arrow(pa.array([1, 2], pa.uint8()))  # an array, not a batch
