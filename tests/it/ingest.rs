//! Ingest of every supported format, and malformed files.

use crate::common::OwnMut;
use crate::common::{first_data_page, vector_tag_batch, with_inserted, write_parquet};
use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int32Array, ListArray, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field};
use shoal::ingest::ingest;
use shoal::ingest::{write_fvecs, IngestOptions};
use shoal::{ColumnType, Config, Dataset, Error, Metric, Query, ScalarValue};
use std::path::Path;
use std::sync::Arc;

fn vectors(n: usize, dim: usize) -> Vec<Vec<f32>> {
    // Distinct rows: the first coordinate carries the row number.
    (0..n)
        .map(|i| {
            (0..dim)
                .map(|j| {
                    if j == 0 {
                        i as f32 * 0.01
                    } else {
                        ((i * 7 + j * 3) % 11) as f32 - 5.0
                    }
                })
                .collect()
        })
        .collect()
}

fn quiet() -> IngestOptions {
    IngestOptions::default()
}

/// The magic, version and padded header of a version 1.0 `.npy` file.
fn npy_header(descr: &str, shape: &str) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes
}

fn write_npy(path: &Path, rows: &[Vec<f32>], descr: &str) {
    let dim = rows[0].len();
    let mut bytes = npy_header(descr, &format!("({}, {dim})", rows.len()));
    for r in rows {
        for x in r {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn fvecs_with_meta_gets_row_position_ids_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("base.fvecs");
    let rows = vectors(1000, 12);
    write_fvecs(&input, &rows).unwrap();
    let meta = dir.path().join("meta.jsonl");
    let text: String = (0..1000)
        .map(|i| {
            format!(
                "{{\"word\": \"w{i}\", \"len\": {}, \"score\": {}}}\n",
                i % 17,
                i as f64 / 2.0
            )
        })
        .collect();
    std::fs::write(&meta, text).unwrap();
    let config = Config::from_toml_str("[ingest]\nchunk_rows = 300\n").unwrap();
    let opts = IngestOptions {
        meta: Some(meta),
        metric: Some(Metric::Cosine),
        ..quiet()
    };
    let report = ingest(&dir.path().join("ds"), &input, &opts, &config).unwrap();
    assert_eq!(report.rows, 1000);
    assert!(report.created);
    let ds = Dataset::open(dir.path().join("ds")).unwrap();
    let col = ds.schema().column("vector").unwrap();
    assert_eq!(
        col.ty,
        ColumnType::Vector {
            dim: 12,
            metric: Metric::Cosine
        }
    );
    assert_eq!(ds.schema().column("len").unwrap().ty, ColumnType::Int64);
    assert_eq!(ds.schema().column("score").unwrap().ty, ColumnType::Float64);
    let mut q = Query::new(rows[321].clone(), 1);
    q.own_mut().projection = vec!["word".into(), "len".into()];
    q.own_mut().filter = Some("word = 'w321'".into());
    let hit = &ds.search(&q).unwrap().hits[0];
    assert_eq!(hit.id, 321);
    assert_eq!(
        hit.values,
        vec![
            ScalarValue::Utf8("w321".into()),
            ScalarValue::Int64(321 % 17)
        ]
    );
    // A second ingest continues the ids.
    let report = ingest(&dir.path().join("ds"), &input, &quiet(), &config).unwrap();
    assert!(!report.created);
    let ds = Dataset::open(dir.path().join("ds")).unwrap();
    assert_eq!(ds.count_rows(), 2000);
    let mut q = Query::new(rows[5].clone(), 2);
    q.own_mut().filter = Some("id >= 1000".into());
    assert_eq!(ds.search(&q).unwrap().hits[0].id, 1005);
}

#[test]
fn npy_parquet_and_jsonl_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let rows = vectors(200, 8);
    // npy
    let npy = dir.path().join("v.npy");
    write_npy(&npy, &rows, "<f4");
    ingest(&dir.path().join("npy"), &npy, &quiet(), &Config::default()).unwrap();
    let ds = Dataset::open(dir.path().join("npy")).unwrap();
    assert_eq!(ds.count_rows(), 200);
    assert_eq!(
        ds.search(&Query::new(rows[42].clone(), 1)).unwrap().hits[0].id,
        42
    );
    // parquet, List<Float32> and FixedSizeList<Float32> columns
    for fixed in [false, true] {
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let values = Arc::new(Float32Array::from(flat));
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let vec_col: ArrayRef = if fixed {
            Arc::new(FixedSizeListArray::try_new(item, 8, values, None).unwrap())
        } else {
            let offsets = arrow_buffer::OffsetBuffer::from_lengths(vec![8usize; 200]);
            Arc::new(ListArray::try_new(item, offsets, values, None).unwrap())
        };
        let batch = RecordBatch::try_from_iter(vec![
            ("emb", vec_col),
            (
                "n",
                Arc::new(Int32Array::from_iter_values(0..200)) as ArrayRef,
            ),
            (
                "tag",
                Arc::new(StringArray::from_iter_values(
                    (0..200).map(|i| format!("t{}", i % 3)),
                )) as ArrayRef,
            ),
        ])
        .unwrap();
        let path = dir.path().join(format!("v{fixed}.parquet"));
        let file = std::fs::File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let target = dir.path().join(format!("pq{fixed}"));
        ingest(&target, &path, &quiet(), &Config::default()).unwrap();
        let ds = Dataset::open(&target).unwrap();
        assert_eq!(ds.schema().column("n").unwrap().ty, ColumnType::Int64);
        let mut q = Query::new(rows[7].clone(), 1);
        q.own_mut().filter = Some("tag = 't1' AND n < 10".into());
        assert_eq!(ds.search(&q).unwrap().hits[0].id, 7);
    }
    // jsonl
    let jl = dir.path().join("rows.jsonl");
    let text: String = rows
        .iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::json!({"id": 1000 + i, "emb": v, "ok": i % 2 == 0}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&jl, text).unwrap();
    ingest(&dir.path().join("jl"), &jl, &quiet(), &Config::default()).unwrap();
    let ds = Dataset::open(dir.path().join("jl")).unwrap();
    let mut q = Query::new(rows[9].clone(), 1);
    q.shared.column = Some("emb".into());
    q.own_mut().filter = Some("NOT ok".into());
    assert_eq!(ds.search(&q).unwrap().hits[0].id, 1009);
}

fn expect_malformed(path: &Path, needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("ds");
    // A dataset that already has a version: a failed ingest must not change it.
    let good = dir.path().join("good.fvecs");
    write_fvecs(&good, &vectors(5, 4)).unwrap();
    ingest(&target, &good, &quiet(), &Config::default()).unwrap();
    let before = Dataset::open(&target).unwrap();
    let err = ingest(&target, path, &quiet(), &Config::default()).unwrap_err();
    assert!(err.is_user_error(), "{err}");
    assert!(
        err.to_string().contains(needle),
        "expected '{needle}' in: {err}"
    );
    let after = Dataset::open(&target).unwrap();
    assert_eq!(after.version(), before.version());
    assert_eq!(after.count_rows(), 5);
}

#[test]
fn malformed_inputs_name_the_row_or_byte_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    // fvecs truncated inside the third record.
    let mut bytes = Vec::new();
    for v in vectors(3, 4) {
        bytes.extend_from_slice(&4i32.to_le_bytes());
        v.iter()
            .for_each(|x| bytes.extend_from_slice(&x.to_le_bytes()));
    }
    bytes.truncate(bytes.len() - 3);
    std::fs::write(p("trunc.fvecs"), &bytes).unwrap();
    expect_malformed(&p("trunc.fvecs"), "record 2");
    // fvecs with a changing dimension.
    let mut bytes = Vec::new();
    for (i, v) in vectors(3, 4).iter().enumerate() {
        let d = if i == 1 { 3 } else { 4 };
        bytes.extend_from_slice(&(d as i32).to_le_bytes());
        v[..d]
            .iter()
            .for_each(|x| bytes.extend_from_slice(&x.to_le_bytes()));
    }
    std::fs::write(p("dims.fvecs"), &bytes).unwrap();
    expect_malformed(&p("dims.fvecs"), "record 1 at byte 20 has dimension 3");
    // fvecs of the wrong dimension for the dataset.
    write_fvecs(&p("wide.fvecs"), &vectors(3, 6)).unwrap();
    expect_malformed(&p("wide.fvecs"), "dimension is 4");
    // NaN in data.
    let mut v = vectors(3, 4);
    v[2][1] = f32::NAN;
    write_fvecs(&p("nan.fvecs"), &v).unwrap();
    expect_malformed(&p("nan.fvecs"), "row 2");
    // npy: wrong dtype, truncated data.
    write_npy(&p("f8.npy"), &vectors(3, 4), "<f8");
    expect_malformed(&p("f8.npy"), "<f8");
    write_npy(&p("short.npy"), &vectors(3, 4), "<f4");
    let b = std::fs::read(p("short.npy")).unwrap();
    std::fs::write(p("short.npy"), &b[..b.len() - 8]).unwrap();
    expect_malformed(&p("short.npy"), "row 2");
    std::fs::write(p("junk.npy"), b"hello").unwrap();
    expect_malformed(&p("junk.npy"), "not an .npy file");
    // jsonl: bad JSON on line 2, wrong type on line 1.
    std::fs::write(
        p("bad.jsonl"),
        "{\"vector\": [1,2,3,4]}\n{\"vector\": [1,2\n",
    )
    .unwrap();
    expect_malformed(&p("bad.jsonl"), "line 2");
    std::fs::write(p("type.jsonl"), "{\"vector\": \"abc\"}\n").unwrap();
    expect_malformed(&p("type.jsonl"), "line 1");
    std::fs::write(p("extra.jsonl"), "{\"vector\": [1,2,3,4], \"nope\": 1}\n").unwrap();
    expect_malformed(&p("extra.jsonl"), "nope");
    // parquet that is not parquet.
    std::fs::write(p("fake.parquet"), b"PAR1 but not really").unwrap();
    expect_malformed(&p("fake.parquet"), "fake.parquet");
    // meta with fewer lines than vectors.
    let dir2 = tempfile::tempdir().unwrap();
    write_fvecs(&dir2.path().join("v.fvecs"), &vectors(4, 4)).unwrap();
    std::fs::write(dir2.path().join("m.jsonl"), "{\"a\": 1}\n").unwrap();
    let opts = IngestOptions {
        meta: Some(dir2.path().join("m.jsonl")),
        ..quiet()
    };
    let err = ingest(
        &dir2.path().join("ds"),
        &dir2.path().join("v.fvecs"),
        &opts,
        &Config::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("fewer than the vectors"), "{err}");
    // unknown extension
    assert!(matches!(
        ingest(
            &dir2.path().join("ds"),
            &dir2.path().join("x.csv"),
            &quiet(),
            &Config::default()
        ),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_failed_first_ingest_leaves_no_dataset_behind() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("ds");
    let mut bad = vectors(8, 4);
    bad[4][2] = f32::NAN;
    let input = dir.path().join("nan.fvecs");
    write_fvecs(&input, &bad).unwrap();
    let opts = IngestOptions {
        metric: Some(Metric::Cosine),
        ..quiet()
    };
    let err = ingest(&target, &input, &opts, &Config::default()).unwrap_err();
    assert!(err.to_string().contains("row 4"), "{err}");
    assert!(!target.exists(), "the failed first ingest left {target:?}");
    // Nothing is locked in: another dimension and metric are taken.
    let good = dir.path().join("good.fvecs");
    write_fvecs(&good, &vectors(5, 6)).unwrap();
    let report = ingest(&target, &good, &quiet(), &Config::default()).unwrap();
    assert!(report.created);
    let ds = Dataset::open(&target).unwrap();
    assert_eq!(
        ds.schema().column("vector").unwrap().ty,
        ColumnType::Vector {
            dim: 6,
            metric: Metric::L2
        }
    );
    // A directory that existed before keeps its other files.
    let existing = dir.path().join("kept");
    std::fs::create_dir(&existing).unwrap();
    std::fs::write(existing.join("notes.txt"), "mine").unwrap();
    assert!(ingest(&existing, &input, &quiet(), &Config::default()).is_err());
    let left: Vec<_> = std::fs::read_dir(&existing)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("notes.txt")]);
}

#[test]
fn a_metric_that_disagrees_with_the_dataset_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("ds");
    let input = dir.path().join("v.fvecs");
    write_fvecs(&input, &vectors(5, 4)).unwrap();
    let before = ingest(&target, &input, &quiet(), &Config::default())
        .unwrap()
        .version;
    let cosine = IngestOptions {
        metric: Some(Metric::Cosine),
        ..quiet()
    };
    let err = ingest(&target, &input, &cosine, &Config::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(
        err.to_string()
            .contains("uses l2; the metric asked for, cosine, disagrees"),
        "{err}"
    );
    assert_eq!(Dataset::open(&target).unwrap().version(), before);
    // The same metric, said again, is fine.
    let l2 = IngestOptions {
        metric: Some(Metric::L2),
        ..quiet()
    };
    assert_eq!(
        ingest(&target, &input, &l2, &Config::default())
            .unwrap()
            .version,
        before + 1
    );
}

/// The version and row count of the dataset at `dir`, or `None` when
/// there is no dataset.
fn state(dir: &Path) -> Option<(u64, u64)> {
    let ds = Dataset::open(dir).ok()?;
    Some((ds.version(), ds.count_rows()))
}

/// 31 bytes inserted into the first data page of a Parquet file make the
/// parquet crate panic (an over-long VLQ integer in the levels): a guard
/// turns that into a malformed-input error naming the file, and the ingest
/// commits nothing.
#[test]
fn a_parquet_decoder_panic_is_malformed_input_and_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    write_parquet(&good, &vector_tag_batch(200, 8, false));
    let target = dir.path().join("ds");
    ingest(&target, &good, &quiet(), &Config::default()).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let page = first_data_page(&good);
    let bad = dir.path().join("bad.parquet");
    let mut decoder_failures = 0;
    for at in page..page + 48 {
        std::fs::write(&bad, with_inserted(&bytes, at, 31, 0xFF)).unwrap();
        let before = state(&target).unwrap();
        match ingest(&target, &bad, &quiet(), &Config::default()) {
            Ok(report) => assert_eq!(state(&target).unwrap().0, report.version),
            Err(err) => {
                assert!(matches!(err, Error::MalformedInput { .. }), "+{at}: {err}");
                assert!(err.to_string().contains("bad.parquet"), "{err}");
                decoder_failures += err.to_string().contains("the decoder failed") as usize;
                assert_eq!(state(&target).unwrap(), before, "+{at}: {err}");
                let fresh = dir.path().join("fresh");
                assert!(ingest(&fresh, &bad, &quiet(), &Config::default()).is_err());
                assert!(!fresh.exists(), "a failed first ingest left {fresh:?}");
            }
        }
    }
    assert!(
        decoder_failures > 0,
        "no insertion reached the decoder's panic"
    );
}

#[test]
fn dictionary_encoded_parquet_columns_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let dict = dir.path().join("dict.parquet");
    let batch = vector_tag_batch(100, 4, true);
    let small = arrow_array::Int8Array::from_iter_values((0..100).map(|i| (i % 5) as i8));
    let n = arrow_array::DictionaryArray::<arrow_array::types::UInt8Type>::try_new(
        arrow_array::UInt8Array::from_iter_values((0..100).map(|i| (i % 5) as u8)),
        Arc::new(small.slice(0, 5)),
    )
    .unwrap();
    let with_n = |batch: RecordBatch, n: ArrayRef| {
        let mut columns = batch.columns().to_vec();
        columns.push(n);
        RecordBatch::try_from_iter(["vector", "tag", "n"].into_iter().zip(columns)).unwrap()
    };
    let batch = with_n(batch, Arc::new(n));
    assert!(matches!(
        batch.column(1).data_type(),
        DataType::Dictionary(_, _)
    ));
    write_parquet(&dict, &batch);
    // A new dataset: the dictionaries' value types.
    let target = dir.path().join("ds");
    ingest(&target, &dict, &quiet(), &Config::default()).unwrap();
    let ds = Dataset::open(&target).unwrap();
    assert_eq!(ds.schema().column("tag").unwrap().ty, ColumnType::Utf8);
    assert_eq!(ds.schema().column("n").unwrap().ty, ColumnType::Int64);
    // An existing dataset with plain columns takes them too.
    let plain = dir.path().join("plain.parquet");
    let plain_n = Arc::new(arrow_array::Int64Array::from_iter_values(0..10));
    write_parquet(&plain, &with_n(vector_tag_batch(10, 4, false), plain_n));
    let other = dir.path().join("other");
    ingest(&other, &plain, &quiet(), &Config::default()).unwrap();
    let report = ingest(&other, &dict, &quiet(), &Config::default()).unwrap();
    assert_eq!(report.rows, 100);
    for target in [&target, &other] {
        let ds = Dataset::open(target).unwrap();
        let mut q = Query::new(vec![0.0; 4], 200);
        q.own_mut().filter = Some("tag = 'verb' AND n = 3".into());
        q.own_mut().projection = vec!["tag".into(), "n".into()];
        let hits = &ds.search(&q).unwrap().hits;
        // Rows i of the dictionary file with i % 4 == 1 and i % 5 == 3.
        let want: Vec<i64> = (0..100).filter(|i| i % 4 == 1 && i % 5 == 3).collect();
        let first = if target == &other { 10 } else { 0 };
        let mut got: Vec<i64> = hits.iter().map(|h| h.id - first).collect();
        got.sort();
        assert_eq!(got, want);
        assert!(hits
            .iter()
            .all(|h| h.values == vec![ScalarValue::Utf8("verb".into()), ScalarValue::Int64(3)]));
    }
}

/// A `--meta` file's errors name the meta file and its line (blank lines
/// counted), on a first ingest and on an existing dataset.
#[test]
fn meta_errors_name_the_meta_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("base.fvecs");
    write_fvecs(&input, &vectors(6, 4)).unwrap();
    let meta = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        IngestOptions {
            meta: Some(path),
            ..quiet()
        }
    };
    let good = meta("good.jsonl", &"{\"len\": 1}\n".repeat(6));
    let target = dir.path().join("ds");
    ingest(&target, &input, &good, &Config::default()).unwrap();
    // Line 4 (after a blank line) holds a string where len is an integer.
    let text = "{\"len\": 1}\n\n{\"len\": 2}\n{\"len\": \"six\"}\n{}\n{}\n{}\n";
    let bad = meta("bad.jsonl", text);
    let fresh = dir.path().join("fresh");
    for (target, needle) in [
        (
            &target,
            "bad.jsonl: line 4: field 'len' should be an integer",
        ),
        (
            &fresh,
            "bad.jsonl: line 4: field 'len' is utf8, but int64 on line 1",
        ),
    ] {
        let before = state(target);
        let err = ingest(target, &input, &bad, &Config::default()).unwrap_err();
        assert!(matches!(err, Error::MalformedInput { .. }), "{err}");
        assert!(
            err.to_string().contains(needle),
            "expected '{needle}' in: {err}"
        );
        assert!(!err.to_string().contains("base.fvecs"), "{err}");
        assert_eq!(state(target), before);
    }
    // JSON that does not parse: the meta file and its line.
    let broken = meta("broken.jsonl", "{\"len\": 1}\n{\"len\": \n");
    let err = ingest(&target, &input, &broken, &Config::default()).unwrap_err();
    assert!(err.to_string().contains("broken.jsonl: line 2"), "{err}");
}

/// A meta line that sets the vector column is told so (it used to say
/// that `vector` is not a column while listing it among the columns).
#[test]
fn a_meta_field_naming_the_vector_column_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("base.fvecs");
    write_fvecs(&input, &vectors(3, 4)).unwrap();
    let meta = dir.path().join("m.jsonl");
    std::fs::write(
        &meta,
        "{\"len\": 1}\n{\"len\": 2, \"vector\": [1, 2, 3, 4]}\n{}\n",
    )
    .unwrap();
    let opts = IngestOptions {
        meta: Some(meta.clone()),
        ..quiet()
    };
    let target = dir.path().join("ds");
    let needle = "m.jsonl: line 2: field 'vector' is the vector column, whose vectors \
                  come from";
    // First ingest (was "duplicate column 'vector'"), then an existing dataset.
    let err = ingest(&target, &input, &opts, &Config::default()).unwrap_err();
    assert!(err.to_string().contains(needle), "{err}");
    assert!(!target.exists());
    ingest(&target, &input, &quiet(), &Config::default()).unwrap();
    let err = ingest(&target, &input, &opts, &Config::default()).unwrap_err();
    assert!(err.to_string().contains(needle), "{err}");
    assert!(err.to_string().contains("base.fvecs"), "{err}");
    assert_eq!(state(&target), Some((2, 3)));
    // With --column len, a meta field 'len' is that vector column.
    let opts = IngestOptions {
        column: Some("len".into()),
        meta: Some(meta),
        ..quiet()
    };
    let err = ingest(&dir.path().join("len"), &input, &opts, &Config::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("line 1: field 'len' is the vector column"),
        "{err}"
    );
}

/// `--column` naming a scalar column or no column says so (it used to say
/// that the input has no vector column 'vector').
#[test]
fn column_naming_a_scalar_or_missing_column_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("base.fvecs");
    write_fvecs(&input, &vectors(3, 4)).unwrap();
    let meta = dir.path().join("m.jsonl");
    std::fs::write(&meta, "{\"len\": 1}\n{\"len\": 2}\n{}\n").unwrap();
    let target = dir.path().join("ds");
    let with_meta = IngestOptions {
        meta: Some(meta),
        ..quiet()
    };
    ingest(&target, &input, &with_meta, &Config::default()).unwrap();
    let column = |name: &str| IngestOptions {
        column: Some(name.into()),
        ..quiet()
    };
    let err = ingest(&target, &input, &column("len"), &Config::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column 'len' is int64, expected a vector column"
    );
    let err = ingest(&target, &input, &column("nope"), &Config::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown column 'nope' (columns: id, vector, len)"
    );
    assert_eq!(state(&target), Some((2, 3)));
}

/// JSON Lines errors name the line in the file, blank lines counted.
#[test]
fn jsonl_errors_count_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    std::fs::write(
        &path,
        "{\"vector\": [1, 2], \"n\": 1}\n\n\n{\"vector\": [3, 4], \"n\": \"x\"}\n",
    )
    .unwrap();
    let err = ingest(&dir.path().join("ds"), &path, &quiet(), &Config::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("rows.jsonl: line 4: field 'n' is utf8, but int64 on line 1"),
        "{err}"
    );
}

/// An `.npy` header sizes nothing: a huge dimension is refused and a huge
/// row count only reads the bytes that are there.
#[test]
fn an_npy_header_cannot_size_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let npy = |name: &str, shape: &str, data: usize| {
        let mut bytes = npy_header("<f4", shape);
        bytes.extend(std::iter::repeat_n(0x3F, data));
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let wide = npy("wide.npy", "(2, 4000000000000)", 64);
    expect_malformed(&wide, "dimension 4000000000000");
    let tall = npy("tall.npy", "(4000000000000, 1048576)", 64);
    expect_malformed(&tall, "truncated: data ends at byte");
}
