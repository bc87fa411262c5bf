//! Seeded fixtures and an independent float64 brute-force reference.

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, FixedSizeListArray, Float32Array, Int64Array,
    RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field};
use rand::{Rng, SeedableRng};
use shoal::{ColumnType, Config, Dataset, Engine, FragmentMeta, Metric, Schema};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// One row as the test knows it, independent of shoal.
#[derive(Clone, Debug)]
pub struct Row {
    pub id: i64,
    pub vector: Vec<f32>,
    pub category: Option<String>,
    pub len: Option<i64>,
    pub flag: bool,
    pub deleted: bool,
}

pub const CATS: [&str; 4] = ["noun", "verb", "adj", "adv"];

/// `n` rows starting at id `first_id`. Vectors have small integer
/// coordinates so that exact distance ties are common, and every 7th row
/// duplicates an earlier vector.
pub fn make_rows(rng: &mut rand::rngs::StdRng, first_id: i64, n: usize, dim: usize) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::with_capacity(n);
    for i in 0..n {
        let vector = if i % 7 == 6 {
            rows[rng.random_range(0..i)].vector.clone()
        } else {
            (0..dim)
                .map(|_| rng.random_range(-4i32..=4) as f32 * 0.5)
                .collect()
        };
        let id = first_id + i as i64;
        rows.push(Row {
            id,
            vector,
            category: if id % 11 == 0 {
                None
            } else {
                Some(CATS[(id % 4) as usize].to_string())
            },
            len: if id % 13 == 0 { None } else { Some(id % 30) },
            flag: id % 3 == 0,
            deleted: false,
        });
    }
    rows
}

pub fn schema(dim: usize, metric: Metric) -> Schema {
    Schema::new(vec![
        ("emb", ColumnType::Vector { dim, metric }),
        ("category", ColumnType::Utf8),
        ("len", ColumnType::Int64),
        ("flag", ColumnType::Bool),
    ])
    .unwrap()
}

pub fn batch_of(rows: &[Row], dim: usize) -> RecordBatch {
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.vector.clone()).collect();
    let list = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, false)),
        dim as i32,
        Arc::new(Float32Array::from(flat)),
        None,
    )
    .unwrap();
    RecordBatch::try_from_iter(vec![
        (
            "id",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.id))) as ArrayRef,
        ),
        ("emb", Arc::new(list) as ArrayRef),
        (
            "category",
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.category.clone()).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "len",
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.len).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "flag",
            Arc::new(BooleanArray::from(
                rows.iter().map(|r| Some(r.flag)).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
    ])
    .unwrap()
}

/// A dataset with one fragment per entry of `fragments`, plus its rows.
pub fn build(
    dir: &Path,
    fragments: &[usize],
    dim: usize,
    metric: Metric,
    seed: u64,
) -> (Dataset, Vec<Row>) {
    build_with(dir, fragments, dim, metric, seed, Config::default())
}

/// The config of a dataset written as shoal wrote them before manifest
/// format 4: fragments as Arrow IPC files.
pub fn arrow_ipc_config() -> Config {
    let mut config = Config::default();
    config.storage.fragment_layout = shoal::FragmentLayout::ArrowIpc;
    config
}

/// [`build`] with `config` (say, [`arrow_ipc_config`]).
pub fn build_with(
    dir: &Path,
    fragments: &[usize],
    dim: usize,
    metric: Metric,
    seed: u64,
    config: Config,
) -> (Dataset, Vec<Row>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ds = Dataset::create(dir, schema(dim, metric), config).unwrap();
    let mut all = Vec::new();
    for &n in fragments {
        let rows = make_rows(&mut rng, all.len() as i64, n, dim);
        ds.append([Ok(batch_of(&rows, dim))]).unwrap();
        all.extend(rows);
    }
    (ds, all)
}

/// Distance in float64, straight from the definitions.
pub fn ref_distance(metric: Metric, q: &[f32], x: &[f32]) -> f64 {
    let dot: f64 = q.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum();
    let qq: f64 = q.iter().map(|a| (*a as f64).powi(2)).sum();
    let xx: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum();
    match metric {
        Metric::L2 => q
            .iter()
            .zip(x)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum(),
        Metric::Dot => -dot,
        Metric::Cosine => {
            if xx == 0.0 {
                1.0
            } else {
                1.0 - dot / (qq.sqrt() * xx.sqrt())
            }
        }
    }
}

/// The error bound the kernel promises for one pair.
pub fn bound(metric: Metric, q: &[f32], x: &[f32]) -> f64 {
    let qq: f64 = q.iter().map(|a| (*a as f64).powi(2)).sum();
    let xx: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum();
    match metric {
        Metric::Cosine => 1e-5,
        _ => 1e-5 * (qq + xx) + 1e-6,
    }
}

/// Brute-force top (offset + k) over visible rows passing `keep`, in
/// `(distance, id)` order, then paged. Returns `(id, distance)` pairs.
pub fn brute_force(
    rows: &[Row],
    metric: Metric,
    q: &[f32],
    k: usize,
    offset: usize,
    keep: &dyn Fn(&Row) -> bool,
) -> Vec<(i64, f64)> {
    let mut all: Vec<(i64, f64)> = rows
        .iter()
        .filter(|r| !r.deleted && keep(r))
        .map(|r| (r.id, ref_distance(metric, q, &r.vector)))
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.into_iter().skip(offset).take(k).collect()
}

/// Checks shoal's hits against the reference: same length; position by
/// position the returned row's true distance equals the reference's within
/// the bound (so rows may only swap with near-ties); shoal's distance within
/// the bound of the true one; no duplicates; every row allowed.
pub fn assert_matches_reference(
    hits: &[shoal::Hit],
    reference: &[(i64, f64)],
    rows: &[Row],
    metric: Metric,
    q: &[f32],
    keep: &dyn Fn(&Row) -> bool,
    context: &str,
) {
    assert_eq!(hits.len(), reference.len(), "{context}: row count");
    let mut seen = std::collections::HashSet::new();
    for (i, (h, (_, ref_d))) in hits.iter().zip(reference).enumerate() {
        let row = &rows[h.id as usize];
        assert!(
            !row.deleted && keep(row),
            "{context}: row {} should not be returned",
            h.id
        );
        assert!(seen.insert(h.id), "{context}: row {} returned twice", h.id);
        let true_d = ref_distance(metric, q, &row.vector);
        let b = bound(metric, q, &row.vector);
        assert!(
            (true_d - ref_d).abs() <= 2.0 * b,
            "{context}: position {i}: id {} at true distance {true_d}, reference has {ref_d}",
            h.id
        );
        assert!(
            (h.distance as f64 - true_d).abs() <= b,
            "{context}: id {} distance {} vs true {true_d}",
            h.id,
            h.distance
        );
    }
    for w in hits.windows(2) {
        let ordered = w[0].distance < w[1].distance
            || (w[0].distance == w[1].distance && w[0].row_id < w[1].row_id);
        assert!(ordered, "{context}: rows out of (distance, row_id) order");
    }
}

/// `size` query vectors of `dim` floats for batch tests: a third repeat an
/// earlier query of the batch, a third copy a data row (exact ties), the
/// rest are random.
pub fn random_queries(
    rng: &mut rand::rngs::StdRng,
    rows: &[Row],
    size: usize,
    dim: usize,
) -> Vec<Vec<f32>> {
    let mut vectors: Vec<Vec<f32>> = Vec::new();
    for i in 0..size {
        let v = match rng.random_range(0..3) {
            0 if i > 0 => vectors[rng.random_range(0..i)].clone(),
            1 => rows[rng.random_range(0..rows.len())].vector.clone(),
            _ => (0..dim).map(|_| rng.random_range(-2.0f32..2.0)).collect(),
        };
        vectors.push(v);
    }
    vectors
}

/// `n` rows of a `vector` column (`dim` floats, distinct rows) and a `tag`
/// string column, plain or dictionary-encoded.
pub fn vector_tag_batch(n: usize, dim: usize, dictionary: bool) -> RecordBatch {
    let flat: Vec<f32> = (0..n * dim)
        .map(|i| ((i * 7) % 11) as f32 - 5.0 + (i / dim) as f32 * 0.01)
        .collect();
    let vectors = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        dim as i32,
        Arc::new(Float32Array::from(flat)),
        None,
    )
    .unwrap();
    let tags = (0..n).map(|i| CATS[i % CATS.len()]);
    let tag: ArrayRef = if dictionary {
        Arc::new(tags.collect::<DictionaryArray<Int32Type>>())
    } else {
        Arc::new(StringArray::from_iter_values(tags))
    };
    RecordBatch::try_from_iter(vec![
        ("vector", Arc::new(vectors) as ArrayRef),
        ("tag", tag),
    ])
    .unwrap()
}

/// `batch` written as a Parquet file at `path` (the writer's defaults:
/// uncompressed, dictionary pages first).
pub fn write_parquet(path: &Path, batch: &RecordBatch) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// Byte offset of the first data page of the Parquet file at `path` (first
/// row group, first column), from its metadata.
pub fn first_data_page(path: &Path) -> usize {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let offset = reader.metadata().row_group(0).column(0).data_page_offset();
    usize::try_from(offset).unwrap()
}

/// `bytes` with `count` copies of `fill` inserted at `at`.
pub fn with_inserted(bytes: &[u8], at: usize, count: usize, fill: u8) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out.splice(at..at, std::iter::repeat_n(fill, count));
    out
}

/// Mutable access to a query's own parameters, for tests that set one
/// field of a [`shoal::Query`] or of a [`shoal::BatchQuery`] whose queries
/// all share their parameters.
pub trait OwnMut {
    /// The parameters every query of this request uses.
    fn own_mut(&mut self) -> &mut shoal::PerQueryParams;
}

impl OwnMut for shoal::Query {
    fn own_mut(&mut self) -> &mut shoal::PerQueryParams {
        &mut self.own
    }
}

impl OwnMut for shoal::BatchQuery {
    fn own_mut(&mut self) -> &mut shoal::PerQueryParams {
        match &mut self.own {
            shoal::PerQuery::All(own) => own,
            shoal::PerQuery::Each(_) => panic!("own_mut on a batch with per-query parameters"),
        }
    }
}

/// `(id, distance bits, values)` of every hit of every query: what a
/// caller sees (row ids are internal and change when rows move).
pub type Seen = Vec<Vec<(i64, u32, Vec<shoal::ScalarValue>)>>;

/// What `batch` answers on `ds`, as a caller sees it (see [`Seen`]).
pub fn seen(ds: &Dataset, batch: &shoal::BatchQuery) -> Seen {
    ds.search_batch(batch)
        .unwrap()
        .hits
        .iter()
        .map(|hits| {
            hits.iter()
                .map(|h| (h.id, h.distance.to_bits(), h.values.clone()))
                .collect()
        })
        .collect()
}

/// A paged file's page directory: per schema column, its pages'
/// `offset..end` byte ranges and rows per page.
pub struct Directory {
    /// Per schema column: rows per page, and its pages' byte ranges.
    pub columns: Vec<(u32, Vec<Range<u64>>)>,
}

/// Parses the directory of the fragment `meta` from the file's `bytes`.
pub fn directory_of(meta: &FragmentMeta, bytes: &[u8]) -> Directory {
    let layout = meta.paged.expect("a paged fragment");
    let start = layout.directory_offset as usize;
    let dir = &bytes[start..start + layout.directory_len as usize];
    assert_eq!(crc32fast::hash(dir), layout.directory_crc32);
    assert_eq!(&dir[..8], b"SHOALPG1");
    let u32_at = |at: usize| u32::from_le_bytes(dir[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(dir[at..at + 8].try_into().unwrap());
    assert_eq!(u64_at(8), meta.rows);
    let mut at = 20;
    let mut columns = Vec::new();
    for _ in 0..u32_at(16) {
        let (page_rows, pages) = (u32_at(at), u32_at(at + 4));
        at += 8;
        let mut ranges = Vec::new();
        for _ in 0..pages {
            let (offset, len) = (u64_at(at), u64::from(u32_at(at + 8)));
            ranges.push(offset..offset + len);
            at += 16;
        }
        columns.push((page_rows, ranges));
    }
    assert_eq!(at, dir.len());
    Directory { columns }
}

/// A running server on an ephemeral port, stopped on drop.
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Stops the server (taken by a test that stops it itself).
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The server's thread (taken with `stop`).
    pub thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serves the datasets under `data` with `config`.
    pub fn start(data: &Path, config: Config) -> Server {
        let data = data.to_path_buf();
        Server::serving(move || Engine::start(config, &data).unwrap())
    }

    /// Serves the engine `make` builds (called inside the server's runtime).
    pub fn serving(make: impl FnOnce() -> Engine + Send + 'static) -> Server {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let address = listener.local_addr().unwrap();
                let engine = make();
                ready_tx.send(address).unwrap();
                shoal::http::serve(listener, engine, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        let address = ready_rx.recv().unwrap();
        Server {
            url: format!("http://{address}"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An HTTP client that answers 4xx and 5xx statuses instead of failing.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}
