//! Every Arrow type that fits a field round-trips byte-exact through `Writer::append_record_batch` (sliced batches included, a null of a variable-length field as an absent value), and every misfit (a type, a name, a null of a fixed-shape field, a null item) is refused with a typed error naming the column before any row is appended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use arrow_array::builder::{FixedSizeListBuilder, Int16Builder};
use arrow_array::types::{Float32Type, Int16Type, Int32Type, UInt32Type, UInt8Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Date32Array, DictionaryArray,
    FixedSizeBinaryArray, FixedSizeListArray, Float16Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, Int8Array, LargeBinaryArray, LargeListArray, LargeStringArray,
    ListArray, RecordBatch, StringArray, StringViewArray, StructArray, UInt16Array, UInt32Array,
    UInt64Array, UInt8Array,
};
use arrow_buffer::{Buffer, ScalarBuffer};
use arrow_schema::{DataType, Field as ArrowField};
use std::path::Path;
use std::sync::Arc;
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

/// One column: its field, its Arrow array and the bytes each row must read back as.
struct Case {
    field: Field,
    column: ArrayRef,
    expected: Vec<Vec<u8>>,
}

fn case(field: Field, column: impl Array + 'static, expected: Vec<Vec<u8>>) -> Case {
    Case {
        field,
        column: Arc::new(column),
        expected,
    }
}

/// The rows of scalar values: little-endian bytes, nothing for a null.
fn le<T: Copy, const N: usize>(vals: &[Option<T>], f: impl Fn(T) -> [u8; N]) -> Vec<Vec<u8>> {
    vals.iter()
        .map(|v| v.map(|x| f(x).to_vec()).unwrap_or_default())
        .collect()
}

fn scalar(name: &str, dtype: DType) -> Field {
    Field::new(name, dtype).shape(vec![])
}

/// A variable-length field: where a null is an absent value.
fn var(name: &str, dtype: DType) -> Field {
    Field::new(name, dtype)
}

fn bytes_rows(vals: &[Option<&[u8]>]) -> Vec<Vec<u8>> {
    vals.iter()
        .map(|v| v.unwrap_or_default().to_vec())
        .collect()
}

/// Four rows of every type that fits, row 1 null where the type allows it.
fn cases() -> Vec<Case> {
    let i8s = [Some(-1i8), None, Some(7), Some(i8::MIN)];
    let i16s = [Some(-300i16), None, Some(7), Some(i16::MAX)];
    let i32s = [Some(-70000i32), None, Some(0), Some(i32::MIN)];
    let i64s = [Some(-1i64 << 40), None, Some(1), Some(i64::MAX)];
    let u8s = [Some(255u8), None, Some(0), Some(9)];
    let u16s = [Some(65535u16), None, Some(1), Some(0x3f80)];
    let u32s = [Some(u32::MAX), None, Some(5), Some(1 << 20)];
    let u64s = [Some(u64::MAX), None, Some(5), Some(1 << 50)];
    let f32s = [Some(1.5f32), None, Some(-0.0), Some(f32::NAN)];
    let f64s = [Some(2.25f64), None, Some(f64::INFINITY), Some(-1e300)];
    let bools = [Some(true), None, Some(false), Some(true)];
    let f16_bits = [0x3c00u16, 0, 0xc000, 0x7bff];
    let f16 = Float16Array::new(
        ScalarBuffer::new(Buffer::from_vec(f16_bits.to_vec()), 0, 4),
        Some(vec![true, false, true, true].into()),
    );
    let blobs: [Option<&[u8]>; 4] = [Some(b"caption one"), None, Some(b""), Some(&[0, 255, 7])];
    let strs = [Some("a cat on a mat"), None, Some(""), Some("ünïcødé")];
    let str_rows = strs.map(|s| s.map(str::as_bytes));
    let long = "x".repeat(40); // longer than a view's 12 inline bytes
    let views = [Some("short"), None, Some(long.as_str()), Some("")];
    let view_rows = views.map(|s| s.map(str::as_bytes));

    // FixedSizeList<u8, 4> with a null row.
    let fsl_u8 = FixedSizeListArray::try_new(
        Arc::new(ArrowField::new_list_field(DataType::UInt8, true)),
        4,
        Arc::new(UInt8Array::from((0u8..16).collect::<Vec<_>>())),
        Some(vec![true, true, false, true].into()),
    )
    .unwrap();
    let fsl_u8_rows = vec![
        vec![0, 1, 2, 3],
        vec![4, 5, 6, 7],
        vec![],
        vec![12, 13, 14, 15],
    ];
    // FixedSizeList<FixedSizeList<i16, 3>, 2>.
    let mut nested =
        FixedSizeListBuilder::new(FixedSizeListBuilder::new(Int16Builder::new(), 3), 2);
    let mut nested_rows = Vec::new();
    for r in 0..4i16 {
        let mut row = Vec::new();
        for p in 0..2i16 {
            for k in 0..3i16 {
                let v = r * 100 + p * 10 - k;
                nested.values().values().append_value(v);
                row.extend(v.to_le_bytes());
            }
            nested.values().append(true);
        }
        nested.append(true);
        nested_rows.push(row);
    }
    let nested = nested.finish();
    // FixedSizeList<bool, 3>.
    let fsl_bool = FixedSizeListArray::try_new(
        Arc::new(ArrowField::new_list_field(DataType::Boolean, false)),
        3,
        Arc::new(BooleanArray::from(
            [
                true, false, true, false, false, true, true, true, true, false, false, false,
            ]
            .to_vec(),
        )),
        None,
    )
    .unwrap();
    let fixed_bin = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
        [Some(b"abcde"), None, Some(b"\0\0\0\0\x01"), Some(b"zzzzz")].into_iter(),
        5,
    )
    .unwrap();
    let list_u32 = [
        Some(vec![Some(1u32), Some(2), Some(3)]),
        None,
        Some(vec![]),
        Some(vec![Some(u32::MAX)]),
    ];
    let list_u32_rows = list_u32
        .iter()
        .map(|r| {
            r.iter()
                .flatten()
                .flat_map(|v| v.unwrap().to_le_bytes())
                .collect()
        })
        .collect();
    let list_f32 = [
        Some(vec![Some(0.5f32)]),
        Some(vec![]),
        None,
        Some(vec![Some(1.0), Some(-2.0)]),
    ];
    let list_f32_rows = list_f32
        .iter()
        .map(|r| {
            r.iter()
                .flatten()
                .flat_map(|v| v.unwrap().to_le_bytes())
                .collect()
        })
        .collect();
    let list_u8 = [
        Some(vec![Some(1u8), Some(2)]),
        None,
        Some(vec![]),
        Some(vec![Some(255)]),
    ];
    let list_u8_rows = list_u8
        .iter()
        .map(|r| r.iter().flatten().map(|v| v.unwrap()).collect())
        .collect();

    vec![
        case(
            var("i8", DType::I8),
            Int8Array::from(i8s.to_vec()),
            le(&i8s, i8::to_le_bytes),
        ),
        case(
            var("i16", DType::I16),
            Int16Array::from(i16s.to_vec()),
            le(&i16s, i16::to_le_bytes),
        ),
        case(
            var("i32", DType::I32),
            Int32Array::from(i32s.to_vec()),
            le(&i32s, i32::to_le_bytes),
        ),
        case(
            var("i64", DType::I64),
            Int64Array::from(i64s.to_vec()),
            le(&i64s, i64::to_le_bytes),
        ),
        case(
            var("u8", DType::U8),
            UInt8Array::from(u8s.to_vec()),
            le(&u8s, u8::to_le_bytes),
        ),
        case(
            var("u16", DType::U16),
            UInt16Array::from(u16s.to_vec()),
            le(&u16s, u16::to_le_bytes),
        ),
        case(
            var("u32", DType::U32),
            UInt32Array::from(u32s.to_vec()),
            le(&u32s, u32::to_le_bytes),
        ),
        case(
            var("u64", DType::U64),
            UInt64Array::from(u64s.to_vec()),
            le(&u64s, u64::to_le_bytes),
        ),
        case(
            var("f32", DType::F32),
            Float32Array::from(f32s.to_vec()),
            le(&f32s, f32::to_le_bytes),
        ),
        case(
            var("f64", DType::F64),
            Float64Array::from(f64s.to_vec()),
            le(&f64s, f64::to_le_bytes),
        ),
        case(
            var("bool", DType::Bool),
            BooleanArray::from(bools.to_vec()),
            le(&bools, |b| [u8::from(b)]),
        ),
        case(
            var("f16", DType::F16),
            f16,
            vec![
                f16_bits[0].to_le_bytes().to_vec(),
                vec![],
                f16_bits[2].to_le_bytes().to_vec(),
                f16_bits[3].to_le_bytes().to_vec(),
            ],
        ),
        // Raw bits into a bf16 field (Arrow has no bfloat16).
        case(
            var("bf16", DType::Bf16),
            UInt16Array::from(u16s.to_vec()),
            le(&u16s, u16::to_le_bytes),
        ),
        // Scalars without nulls into shape [] fields (the primitives above go into
        // variable-length fields, where a null is an absent value: one item per record).
        case(
            scalar("u32_scalar", DType::U32),
            UInt32Array::from(vec![1u32, 2, 3, u32::MAX]),
            le(
                &[Some(1u32), Some(2), Some(3), Some(u32::MAX)],
                u32::to_le_bytes,
            ),
        ),
        case(
            scalar("bool_scalar", DType::Bool),
            BooleanArray::from(vec![true, false, false, true]),
            vec![vec![1], vec![0], vec![0], vec![1]],
        ),
        case(
            Field::new("fsl_u8", DType::U8).shape(vec![4]),
            FixedSizeListArray::new(
                Arc::new(ArrowField::new_list_field(DataType::UInt8, true)),
                4,
                Arc::new(UInt8Array::from((0u8..16).collect::<Vec<_>>())),
                None,
            ),
            (0u8..4).map(|r| (r * 4..r * 4 + 4).collect()).collect(),
        ),
        case(
            Field::new("fixed_bin", DType::Bytes).shape(vec![2]),
            FixedSizeBinaryArray::try_from_iter([b"ab", b"cd", b"ef", b"gh"].into_iter()).unwrap(),
            vec![
                b"ab".to_vec(),
                b"cd".to_vec(),
                b"ef".to_vec(),
                b"gh".to_vec(),
            ],
        ),
        case(Field::new("fsl_u8_var", DType::U8), fsl_u8, fsl_u8_rows),
        case(
            Field::new("fsl_nested", DType::I16).shape(vec![2, 3]),
            nested,
            nested_rows,
        ),
        case(
            Field::new("fsl_bool", DType::Bool).shape(vec![3]),
            fsl_bool,
            vec![vec![1, 0, 1], vec![0, 0, 1], vec![1, 1, 1], vec![0, 0, 0]],
        ),
        case(
            Field::new("fixed_bin_var", DType::Bytes),
            fixed_bin,
            vec![
                b"abcde".to_vec(),
                vec![],
                b"\0\0\0\0\x01".to_vec(),
                b"zzzzz".to_vec(),
            ],
        ),
        case(
            Field::new("binary", DType::Bytes),
            BinaryArray::from(blobs.to_vec()),
            bytes_rows(&blobs),
        ),
        case(
            Field::new("binary_u8", DType::U8),
            BinaryArray::from(blobs.to_vec()),
            bytes_rows(&blobs),
        ),
        case(
            Field::new("large_binary", DType::Bytes),
            LargeBinaryArray::from(blobs.to_vec()),
            bytes_rows(&blobs),
        ),
        case(
            Field::new("utf8", DType::Bytes),
            StringArray::from(strs.to_vec()),
            bytes_rows(&str_rows),
        ),
        case(
            Field::new("large_utf8", DType::Bytes),
            LargeStringArray::from(strs.to_vec()),
            bytes_rows(&str_rows),
        ),
        case(
            Field::new("binary_view", DType::Bytes),
            BinaryViewArray::from(view_rows.to_vec()),
            bytes_rows(&view_rows),
        ),
        case(
            Field::new("utf8_view", DType::Bytes),
            StringViewArray::from(views.to_vec()),
            bytes_rows(&view_rows),
        ),
        case(
            Field::new("list_u32", DType::U32),
            ListArray::from_iter_primitive::<UInt32Type, _, _>(list_u32),
            list_u32_rows,
        ),
        case(
            Field::new("large_list_f32", DType::F32),
            LargeListArray::from_iter_primitive::<Float32Type, _, _>(list_f32),
            list_f32_rows,
        ),
        // A list of u8 into a bytes field.
        case(
            Field::new("list_u8_bytes", DType::Bytes),
            ListArray::from_iter_primitive::<UInt8Type, _, _>(list_u8),
            list_u8_rows,
        ),
    ]
}

fn batch_of(cases: &[Case]) -> RecordBatch {
    RecordBatch::try_from_iter(
        cases
            .iter()
            .map(|c| (c.field.name.clone(), c.column.clone())),
    )
    .unwrap()
}

fn create(dir: &Path, fields: impl IntoIterator<Item = Field>) -> Writer {
    let schema = fields.into_iter().fold(Schema::new(), Schema::field);
    Writer::create(dir, &schema, WriterConfig::default()).unwrap()
}

/// Every record of the dataset at `dir`: per record, per field, its bytes.
fn read_all(dir: &Path) -> Vec<Vec<Vec<u8>>> {
    let ds = Dataset::open(dir).unwrap();
    let indices: Vec<u64> = (0..ds.len()).collect();
    let batch = ds.gather_blocking(&indices).unwrap();
    let fields = batch.fields().count();
    (0..batch.len())
        .map(|r| {
            (0..fields)
                .map(|f| batch.get(r, f).unwrap().to_vec())
                .collect()
        })
        .collect()
}

#[test]
fn every_fitting_type_round_trips_byte_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let cases = cases();
    let batch = batch_of(&cases);
    let mut w = create(&dir, cases.iter().map(|c| c.field.clone()));
    assert_eq!(w.append_record_batch(&batch).unwrap(), 0..4);
    // A sliced batch: every column starts at row 1 of its buffers (offsets ≠ 0).
    let sliced = batch.slice(1, 3);
    assert_eq!(w.append_record_batch(&sliced).unwrap(), 4..7);
    // An empty slice appends nothing.
    assert_eq!(w.append_record_batch(&batch.slice(4, 0)).unwrap(), 7..7);
    w.commit().unwrap();
    drop(w);

    let got = read_all(&dir);
    assert_eq!(got.len(), 7);
    for (f, c) in cases.iter().enumerate() {
        let rows = (0..4).chain(1..4);
        for (i, r) in rows.enumerate() {
            assert_eq!(
                got[i][f], c.expected[r],
                "field {}, record {i} (row {r})",
                c.field.name
            );
        }
    }
}

/// Appends `column` as field `field` to a fresh dataset that already holds one record, and
/// returns the error; checks nothing was appended.
fn refused(field: Field, column: ArrayRef) -> Error {
    refused_batch(
        vec![field.clone()],
        RecordBatch::try_from_iter([(field.name.clone(), column)]).unwrap(),
    )
}

fn refused_batch(fields: Vec<Field>, batch: RecordBatch) -> Error {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = create(&dir, fields);
    let empty: Vec<&[u8]> = vec![&[]; w_fields(&w)];
    w.append(&empty).unwrap();
    let e = w.append_record_batch(&batch).unwrap_err();
    assert_eq!(w.len(), 1, "nothing appended after {e}");
    // The writer is not poisoned: a fitting record still goes in.
    w.append(&empty).unwrap();
    w.commit().unwrap();
    e
}

fn w_fields(w: &Writer) -> usize {
    Dataset::open(w.path()).unwrap().schema().fields.len()
}

fn assert_type_error(e: Error, col: &str, arrow: &str, dtype: &str) {
    match &e {
        Error::ArrowType {
            column,
            arrow_type,
            dtype: d,
            reason,
        } => {
            assert_eq!(column, col, "{e}");
            assert_eq!(arrow_type, arrow, "{e}");
            assert_eq!(d, dtype, "{e}");
            assert!(!reason.is_empty());
        }
        other => panic!("expected ArrowType for {col}, got {other:?}"),
    }
}

#[test]
fn a_type_that_does_not_fit_is_refused_naming_column_type_and_dtype() {
    let ints: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
    // Another dtype.
    assert_type_error(
        refused(scalar("label", DType::U32), ints.clone()),
        "label",
        "Int32",
        "u32 []",
    );
    // A scalar into a fixed shape of more than one item.
    assert_type_error(
        refused(Field::new("v", DType::I32).shape(vec![2]), ints),
        "v",
        "Int32",
        "i32 [2]",
    );
    // A fixed-size list of another length.
    let fsl = FixedSizeListArray::try_new(
        Arc::new(ArrowField::new_list_field(DataType::UInt8, false)),
        4,
        Arc::new(UInt8Array::from(vec![0u8; 8])),
        None,
    )
    .unwrap();
    assert_type_error(
        refused(
            Field::new("px", DType::U8).shape(vec![5]),
            Arc::new(fsl.clone()),
        ),
        "px",
        "FixedSizeList(4 x non-null UInt8)",
        "u8 [5]",
    );
    // Nested shapes must match dimension by dimension, not just in size.
    let mut nested =
        FixedSizeListBuilder::new(FixedSizeListBuilder::new(Int16Builder::new(), 2), 2);
    for _ in 0..4 {
        nested.values().values().append_value(1);
    }
    nested.values().append(true);
    nested.values().append(true);
    nested.append(true);
    let nested = nested.finish();
    let e = refused(Field::new("m", DType::I16).shape(vec![4]), Arc::new(nested));
    assert!(
        matches!(&e, Error::ArrowType { column, dtype, .. } if column == "m" && dtype == "i16 [4]"),
        "{e}"
    );
    // Strings into a numeric field, and into a fixed-shape bytes field.
    let strs: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
    assert_type_error(
        refused(scalar("n", DType::U32), strs.clone()),
        "n",
        "Utf8",
        "u32 []",
    );
    assert_type_error(
        refused(Field::new("s", DType::Bytes).shape(vec![1]), strs),
        "s",
        "Utf8",
        "bytes [1]",
    );
    // A list into a fixed-shape field, a list of another dtype, a list of lists.
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>([Some(
        vec![Some(1)],
    )]));
    assert_type_error(
        refused(Field::new("l", DType::I32).shape(vec![1]), list.clone()),
        "l",
        "List(Int32)",
        "i32 [1]",
    );
    assert_type_error(
        refused(Field::new("l", DType::F32), list.clone()),
        "l",
        "List(Int32)",
        "f32 (variable length)",
    );
    let list_of_lists = ListArray::try_new(
        Arc::new(ArrowField::new_list_field(list.data_type().clone(), true)),
        arrow_buffer::OffsetBuffer::from_lengths([1]),
        list,
        None,
    )
    .unwrap();
    let e = refused(Field::new("ll", DType::I32), Arc::new(list_of_lists));
    assert!(
        matches!(&e, Error::ArrowType { column, .. } if column == "ll"),
        "{e}"
    );
    // A struct, a dictionary, a date.
    let st = StructArray::from(vec![(
        Arc::new(ArrowField::new("x", DataType::Int32, false)),
        Arc::new(Int32Array::from(vec![1])) as ArrayRef,
    )]);
    let e = refused(Field::new("st", DType::Bytes), Arc::new(st));
    assert!(
        matches!(&e, Error::ArrowType { column, reason, .. } if column == "st" && reason.contains("struct")),
        "{e}"
    );
    let dict: DictionaryArray<Int16Type> = ["a", "b", "a"].into_iter().collect();
    let e = refused(Field::new("d", DType::Bytes), Arc::new(dict));
    assert!(
        matches!(&e, Error::ArrowType { column, reason, .. } if column == "d" && reason.contains("dictionary")),
        "{e}"
    );
    assert_type_error(
        refused(
            scalar("day", DType::I32),
            Arc::new(Date32Array::from(vec![1])),
        ),
        "day",
        "Date32",
        "i32 []",
    );
    // Bytes into a u16 field.
    assert_type_error(
        refused(
            Field::new("b", DType::U16),
            Arc::new(BinaryArray::from(vec![&b"ab"[..]])),
        ),
        "b",
        "Binary",
        "u16 (variable length)",
    );
}

#[test]
fn columns_match_fields_by_name_exactly() {
    let col = |v: u32| -> ArrayRef { Arc::new(UInt32Array::from(vec![v])) };
    let fields = || vec![scalar("a", DType::U32), scalar("b", DType::U32)];
    // Order does not matter.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = create(&dir, fields());
    let swapped = RecordBatch::try_from_iter([("b", col(2)), ("a", col(1))]).unwrap();
    w.append_record_batch(&swapped).unwrap();
    w.commit().unwrap();
    drop(w);
    assert_eq!(
        read_all(&dir),
        vec![vec![
            1u32.to_le_bytes().to_vec(),
            2u32.to_le_bytes().to_vec()
        ]]
    );

    let e = refused_batch(
        fields(),
        RecordBatch::try_from_iter([("a", col(1))]).unwrap(),
    );
    assert!(
        matches!(&e, Error::ArrowColumns { missing, extra, duplicated } if missing == &["b"] && extra.is_empty() && duplicated.is_empty()),
        "{e}"
    );
    let e = refused_batch(
        fields(),
        RecordBatch::try_from_iter([("a", col(1)), ("b", col(2)), ("c", col(3))]).unwrap(),
    );
    assert!(
        matches!(&e, Error::ArrowColumns { missing, extra, .. } if missing.is_empty() && extra == &["c"]),
        "{e}"
    );
    let e = refused_batch(
        fields(),
        RecordBatch::try_from_iter([("a", col(1)), ("b", col(2)), ("a", col(3))]).unwrap(),
    );
    assert!(
        matches!(&e, Error::ArrowColumns { duplicated, .. } if duplicated == &["a"]),
        "{e}"
    );
    assert!(e.to_string().contains("\"a\""), "{e}");
}

#[test]
fn a_null_item_inside_a_value_is_refused_naming_column_and_row() {
    // Row 2 holds a null item; row 1 is null as a whole (fine: an absent value).
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>([
        Some(vec![Some(1)]),
        None,
        Some(vec![Some(2), None]),
    ]);
    let e = refused(Field::new("l", DType::I32), Arc::new(list));
    assert!(
        matches!(&e, Error::ArrowValue { column, row: 2, .. } if column == "l"),
        "{e}"
    );
    // The same in a fixed-size list, sliced so the bad row is row 0 of the batch.
    let fsl = FixedSizeListArray::try_new(
        Arc::new(ArrowField::new_list_field(DataType::UInt8, true)),
        2,
        Arc::new(UInt8Array::from(vec![Some(1), Some(2), Some(3), None])),
        None,
    )
    .unwrap()
    .slice(1, 1);
    let e = refused(Field::new("f", DType::U8).shape(vec![2]), Arc::new(fsl));
    assert!(
        matches!(&e, Error::ArrowValue { column, row: 0, .. } if column == "f"),
        "{e}"
    );
    // A null item under a null row is no value at all: accepted as absent (in a
    // variable-length field).
    let fsl = FixedSizeListArray::try_new(
        Arc::new(ArrowField::new_list_field(DataType::UInt8, true)),
        2,
        Arc::new(UInt8Array::from(vec![Some(1), Some(2), None, None])),
        Some(vec![true, false].into()),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = create(&dir, [Field::new("f", DType::U8)]);
    let batch = RecordBatch::try_from_iter([("f", Arc::new(fsl) as ArrayRef)]).unwrap();
    w.append_record_batch(&batch).unwrap();
    w.commit().unwrap();
    drop(w);
    assert_eq!(read_all(&dir), vec![vec![vec![1, 2]], vec![vec![]]]);
}

#[test]
fn a_value_past_the_record_limit_is_refused_before_any_row() {
    let big = vec![0u8; zrecord::MAX_RECORD_BYTES as usize + 1];
    let col = BinaryArray::from(vec![&b"fits"[..], &big[..]]);
    let e = refused(Field::new("blob", DType::Bytes), Arc::new(col));
    assert!(
        matches!(&e, Error::RecordTooLarge { field, .. } if field == "blob"),
        "{e}"
    );
}
