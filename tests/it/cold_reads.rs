//! Cold reads of paged fragment files (manifest format 4) on object storage:
//!
//! - the old (Arrow IPC) and the new (paged) layouts, local and on a store,
//!   answer exact, IVF_FLAT and IVF_SQ searches (filters, projections,
//!   deletions, ties) bit for bit alike;
//! - `optimize` rewrites old fragments into paged files with the same
//!   fragment ids, row ids and answers, the index still used;
//! - a search with no projection fetches no byte of an indexed fragment's
//!   vectors, only its page directory and the id pages of its hits, never a
//!   whole fragment object; a warm search fetches nothing, and the search's
//!   profile counts exactly the GETs the store saw;
//! - one batch probing every IVF partition reads `partitions.bin` in one
//!   ranged GET;
//! - a damaged page or page directory is `Corrupt`, naming the file;
//! - `prewarm` fills the disk cache so that index searches issue no GET.
//!
//! Every store is an in-memory one wrapped in [`RecordingStore`], which
//! logs each GET (path and byte range) as the store saw it.

use crate::common::*;
use arrow_array::{ArrayRef, Float64Array, RecordBatch};
use rand::SeedableRng;
use shoal::object_store::memory::InMemory;
use shoal::object_store::path::Path as ObjectPath;
use shoal::object_store::{self as os, GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use shoal::object_store::{ObjectMeta, PutPayload};
use shoal::{
    BatchQuery, ColumnType, Config, Dataset, Error, FragmentLayout, IndexKind, IndexParams, Metric,
    PrewarmPartitions, Schema, SearchMode, Session,
};
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};

const DIM: usize = 16;

/// A session config: disk cache in `cache`, new fragments in `layout`,
/// versions listed again only after a minute (a search lists nothing).
fn config_for(cache: &Path, layout: FragmentLayout) -> Config {
    let mut config = Config::default();
    config.cache.disk_dir = cache.display().to_string();
    config.storage.refresh_ms = 60_000;
    config.storage.fragment_layout = layout;
    config
}

/// A session on `store` (registered for `url`) with its own disk cache.
fn session_on(
    store: &Arc<RecordingStore>,
    url: &str,
    cache: &Path,
    layout: FragmentLayout,
) -> Session {
    let session = Session::new(config_for(cache, layout));
    session.register_object_store(url, store.clone()).unwrap();
    session
}

/// One GET the store answered: the object and the bytes it sent.
#[derive(Clone, Debug)]
struct Get {
    path: String,
    /// `None`: the request asked for the whole object.
    asked: Option<GetRange>,
    sent: Range<u64>,
}

/// An in-memory store logging every successful GET (HEADs left out).
#[derive(Debug, Default)]
struct RecordingStore {
    inner: InMemory,
    gets: Mutex<Vec<Get>>,
}

impl RecordingStore {
    fn log(&self) -> Vec<Get> {
        self.gets.lock().unwrap().clone()
    }

    fn clear(&self) {
        self.gets.lock().unwrap().clear();
    }

    /// The object's bytes, read behind the log's back.
    fn read(&self, path: &str) -> Vec<u8> {
        let path = ObjectPath::from(path);
        block_on(async { self.inner.get(&path).await.unwrap().bytes().await.unwrap() }).to_vec()
    }

    fn write(&self, path: &str, bytes: Vec<u8>) {
        let path = ObjectPath::from(path);
        block_on(self.inner.put(&path, PutPayload::from(bytes))).unwrap();
    }
}

fn block_on<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(work)
}

impl std::fmt::Display for RecordingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordingStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for RecordingStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: os::PutOptions,
    ) -> os::Result<os::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: os::PutMultipartOptions,
    ) -> os::Result<Box<dyn os::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> os::Result<os::GetResult> {
        let (head, asked) = (options.head, options.range.clone());
        let got = self.inner.get_opts(location, options).await?;
        if !head {
            self.gets.lock().unwrap().push(Get {
                path: location.to_string(),
                asked,
                sent: got.range.clone(),
            });
        }
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: futures_util::stream::BoxStream<'static, os::Result<ObjectPath>>,
    ) -> futures_util::stream::BoxStream<'static, os::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> futures_util::stream::BoxStream<'static, os::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> os::Result<os::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: os::CopyOptions,
    ) -> os::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// id, a vector column, a string column and a float column.
fn cold_schema() -> Schema {
    let emb = ColumnType::Vector {
        dim: DIM,
        metric: Metric::L2,
    };
    let columns = [("emb", emb), ("category", ColumnType::Utf8)];
    Schema::new(columns.into_iter().chain([("score", ColumnType::Float64)])).unwrap()
}

/// The float column of row `id` (NULL every 19th row).
fn score_of(id: i64) -> Option<f64> {
    (id % 19 != 0).then_some((id % 17) as f64 * 0.25 - 2.0)
}

/// The rows as a batch of [`cold_schema`].
fn cold_batch(rows: &[Row]) -> RecordBatch {
    let base = batch_of(rows, DIM);
    let column = |name: &'static str| (name, base.column_by_name(name).unwrap().clone());
    let score = Float64Array::from_iter(rows.iter().map(|r| score_of(r.id)));
    let score: ArrayRef = Arc::new(score);
    let columns = [column("id"), column("emb"), column("category")];
    RecordBatch::try_from_iter(columns.into_iter().chain([("score", score)])).unwrap()
}

/// Seeded rows (small integer coordinates, every 7th vector a duplicate).
fn seeded_rows(seed: u64, fragments: &[usize]) -> Vec<Vec<Row>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut first = 0;
    fragments
        .iter()
        .map(|&n| {
            let rows = make_rows(&mut rng, first, n, DIM);
            first += n as i64;
            rows
        })
        .collect()
}

/// Appends each fragment's rows to `ds`, then deletes the rows with a
/// score below -1.5.
fn fill(ds: &mut Dataset, fragments: &[Vec<Row>]) {
    for rows in fragments {
        ds.append([cold_batch(rows)]).unwrap();
    }
    assert!(ds.delete("score < -1.5").unwrap().rows > 0);
}

fn queries(fragments: &[Vec<Row>]) -> Vec<Vec<f32>> {
    let all: Vec<&Row> = fragments.iter().flatten().collect();
    let mut out: Vec<Vec<f32>> = (0..10)
        .map(|i| all[i * 97 % all.len()].vector.clone())
        .collect();
    out.push(vec![0.25; DIM]);
    out.push(vec![-1.0; DIM]);
    out
}

fn exact_searches(q: &[Vec<f32>]) -> Vec<BatchQuery> {
    vec![
        BatchQuery::new(q.to_vec(), 10).mode(SearchMode::Exact),
        BatchQuery::new(q.to_vec(), 15)
            .mode(SearchMode::Exact)
            .filter("score > 0.5")
            .select(["category", "score"]),
        BatchQuery::new(q.to_vec(), 8)
            .mode(SearchMode::Exact)
            .offset(5)
            .filter("category = 'noun'")
            .select(["score", "emb"]),
    ]
}

fn ann_searches(q: &[Vec<f32>]) -> Vec<BatchQuery> {
    vec![
        BatchQuery::new(q.to_vec(), 10).nprobes(2),
        BatchQuery::new(q.to_vec(), 12)
            .nprobes(3)
            .filter("category != 'verb' AND score < 1.0")
            .select(["category", "score"]),
        BatchQuery::new(q.to_vec(), 6)
            .nprobes(4)
            .refine_factor(3)
            .select(["emb", "category"]),
    ]
}

/// What a caller sees, plus row ids: `(row id, id, distance bits, values)`.
type Answer = Vec<Vec<(u64, i64, u32, Vec<shoal::ScalarValue>)>>;

fn answer(ds: &Dataset, batch: &BatchQuery) -> (Answer, shoal::Profile) {
    let (results, profile) = ds.explain(batch).unwrap();
    let hits = results
        .hits
        .iter()
        .map(|hits| {
            hits.iter()
                .map(|h| (h.row_id, h.id, h.distance.to_bits(), h.values.clone()))
                .collect()
        })
        .collect();
    (hits, profile)
}

fn answers(ds: &Dataset, batches: &[BatchQuery]) -> Vec<Answer> {
    batches.iter().map(|b| answer(ds, b).0).collect()
}

fn assert_layout(ds: &Dataset, paged: bool, context: &str) {
    for f in &ds.manifest().fragments {
        assert_eq!(f.paged.is_some(), paged, "{context}: fragment {}", f.id);
        let suffix = if paged { ".cols" } else { ".arrow" };
        assert!(f.file.ends_with(suffix), "{context}: {}", f.file);
    }
}

#[test]
fn old_and_new_layouts_answer_identically_local_and_on_a_store() {
    let fragments = seeded_rows(21, &[1_600, 1_100, 700]);
    let q = queries(&fragments);
    let dirs = tempfile::tempdir().unwrap();
    let store = Arc::new(RecordingStore::default());
    let layouts = [
        ("ipc", FragmentLayout::ArrowIpc),
        ("paged", FragmentLayout::Paged),
    ];
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for (name, layout) in layouts {
        let cache = dirs.path().join("unused");
        let dir = dirs.path().join(name);
        local.push(Dataset::create(&dir, cold_schema(), config_for(&cache, layout)).unwrap());
        let url = format!("memory:///cold/{name}");
        let writer = session_on(&store, &url, &dirs.path().join(format!("w-{name}")), layout);
        remote.push((url.clone(), writer.create(&url, cold_schema()).unwrap()));
    }
    for ds in local.iter_mut().chain(remote.iter_mut().map(|(_, d)| d)) {
        fill(ds, &fragments);
    }
    let reference = &local[0];
    assert_layout(reference, false, "local ipc");
    assert_layout(&local[1], true, "local paged");
    assert_eq!(reference.manifest().fragments.len(), 3);
    let exact = exact_searches(&q);
    let expected_exact = answers(reference, &exact);
    // The reference itself is right: its exact answers are brute force's.
    let all: Vec<Row> = fragments.concat();
    let kept = |r: &Row| score_of(r.id).is_none_or(|s| s >= -1.5);
    for (i, v) in q.iter().enumerate() {
        let hits = &reference.search_batch(&exact[0]).unwrap().hits[i];
        let visible: Vec<Row> = all.iter().filter(|r| kept(r)).cloned().collect();
        let want = brute_force(&visible, Metric::L2, v, 10, 0, &|_| true);
        assert_matches_reference(hits, &want, &all, Metric::L2, v, &kept, "reference");
    }
    assert!(expected_exact[1].iter().any(|h| !h.is_empty()));

    for (round, kind) in [IndexKind::IvfFlat, IndexKind::IvfSq]
        .into_iter()
        .enumerate()
    {
        for ds in local.iter_mut().chain(remote.iter_mut().map(|(_, d)| d)) {
            ds.create_index(None, IndexParams::new(kind, 6)).unwrap();
        }
        let ann = ann_searches(&q);
        let expected_ann = answers(&local[0], &ann);
        assert_eq!(
            answers(&local[1], &exact),
            expected_exact,
            "local paged, exact"
        );
        assert_eq!(
            answers(&local[1], &ann),
            expected_ann,
            "local paged, {kind:?}"
        );
        for (i, (url, writer)) in remote.iter().enumerate() {
            let cache = dirs.path().join(format!("cold-{round}-{i}"));
            let cold = session_on(&store, url, &cache, FragmentLayout::Paged)
                .open(url)
                .unwrap();
            assert_layout(&cold, i == 1, url);
            assert_eq!(cold.manifest().fragments, writer.manifest().fragments);
            for (b, want) in ann.iter().zip(&expected_ann) {
                let (got, profile) = answer(&cold, b);
                assert_eq!(&got, want, "{url}: {kind:?}");
                assert_eq!(profile.mode, SearchMode::Shared, "{url}: {kind:?}");
            }
            assert_eq!(answers(&cold, &exact), expected_exact, "{url}: exact");
        }
    }
}

#[test]
fn optimize_rewrites_old_fragments_into_pages_with_the_same_answers() {
    let fragments = seeded_rows(22, &[1_500, 900, 600]);
    let q = queries(&fragments);
    let dirs = tempfile::tempdir().unwrap();
    let root = dirs.path().join("ds");
    let old_config = config_for(&dirs.path().join("cache"), FragmentLayout::ArrowIpc);
    let mut ds = Dataset::create(&root, cold_schema(), old_config).unwrap();
    fill(&mut ds, &fragments);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 6))
        .unwrap();
    assert_layout(&ds, false, "before");
    let before_version = ds.version();
    let searches: Vec<BatchQuery> = exact_searches(&q)
        .into_iter()
        .chain(ann_searches(&q))
        .collect();
    let before = answers(&ds, &searches);
    let before_fragments = ds.manifest().fragments.clone();

    let mut reopened = Dataset::open_with_config(&root, Config::default()).unwrap();
    let commit = reopened.optimize().unwrap();
    let stored_rows: u64 = before_fragments.iter().map(|f| f.rows).sum();
    assert_eq!(
        commit.rows, stored_rows,
        "every row rewritten, deleted ones too"
    );
    assert!(reopened.version() > before_version);
    assert_layout(&reopened, true, "after optimize");
    let after_fragments = &reopened.manifest().fragments;
    assert_eq!(after_fragments.len(), before_fragments.len());
    for (a, b) in after_fragments.iter().zip(&before_fragments) {
        assert_eq!(
            (a.id, a.rows, a.deleted_rows),
            (b.id, b.rows, b.deleted_rows)
        );
        assert_eq!(a.deletion_file, b.deletion_file, "deletions kept");
        assert_ne!(a.file, b.file);
    }
    assert_eq!(reopened.index_segments(), ds.index_segments(), "index kept");
    for (b, want) in searches.iter().zip(&before) {
        let (got, profile) = answer(&reopened, b);
        assert_eq!(&got, want, "after optimize (row ids included)");
        if b.shared.mode != SearchMode::Exact {
            assert_eq!(profile.mode, SearchMode::Shared, "the index is still used");
        }
    }
    // A fresh open (new session, nothing cached) reads the paged files.
    let fresh = Dataset::open(&root).unwrap();
    assert_eq!(answers(&fresh, &searches), before, "fresh open");
    // Optimize again has nothing to do; the old version still answers.
    assert_eq!(reopened.optimize().unwrap().rows, 0);
    let old = fresh.checkout(before_version).unwrap();
    assert_layout(&old, false, "old version");
    assert_eq!(answers(&old, &searches), before, "old version");
}

/// The bytes a GET sent overlap `span`.
fn overlaps(get: &Get, span: &Range<u64>) -> bool {
    get.sent.start < span.end && span.start < get.sent.end
}

/// A local paged dataset of `fragments`, with an IVF_FLAT index of
/// `partitions` unless 0.
fn local_paged(dir: &Path, fragments: &[Vec<Row>], partitions: usize) -> Dataset {
    let mut ds = Dataset::create(dir, cold_schema(), Config::default()).unwrap();
    for rows in fragments {
        ds.append([cold_batch(rows)]).unwrap();
    }
    if partitions > 0 {
        let params = IndexParams::new(IndexKind::IvfFlat, partitions);
        ds.create_index(None, params).unwrap();
    }
    ds
}

/// A dataset of `fragments` on a fresh recording store at `url`, written
/// by its own session, with an IVF_FLAT index of `partitions`.
fn indexed_on_store(
    url: &str,
    cache: &Path,
    fragments: &[Vec<Row>],
    partitions: usize,
) -> (Arc<RecordingStore>, Dataset) {
    let store = Arc::new(RecordingStore::default());
    let writer = session_on(&store, url, cache, FragmentLayout::Paged);
    let mut ds = writer.create(url, cold_schema()).unwrap();
    for rows in fragments {
        ds.append([cold_batch(rows)]).unwrap();
    }
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, partitions))
        .unwrap();
    (store, ds)
}

/// Checks the GETs `log` of a search on `ds` (paged fragments stored
/// under `prefix`) that returned the rows `hits`: no fragment object was
/// fetched whole, no byte of its vectors was; every GET of it is its page
/// directory or lies in its id pages; the id pages holding hits were
/// fetched and no other (a fragment without hits: its directory at most).
/// Returns the
/// id pages fetched.
fn assert_fetched_only_hit_id_pages(
    store: &RecordingStore,
    ds: &Dataset,
    prefix: &str,
    log: &[Get],
    hits: &[u64],
) -> usize {
    let mut fetched_pages = 0;
    for meta in &ds.manifest().fragments {
        let object = format!("{prefix}/data/{}", meta.file);
        let bytes = store.read(&object);
        let dir = directory_of(meta, &bytes);
        let layout = meta.paged.unwrap();
        let directory = layout.directory_offset..layout.directory_offset + layout.directory_len;
        let vectors = &dir.columns[1].1;
        let vectors = vectors[0].start..vectors.last().unwrap().end;
        assert!(
            vectors.end - vectors.start > 64 << 10,
            "vectors: {vectors:?}"
        );
        let (id_rows, id_pages) = &dir.columns[0];
        assert_eq!(*id_rows, 8192, "ids: 8192 rows per page");
        let ids = id_pages[0].start..id_pages.last().unwrap().end;
        let mine: Vec<&Get> = log.iter().filter(|g| g.path == object).collect();
        for get in &mine {
            assert!(get.asked.is_some(), "{object} fetched whole: {get:?}");
            assert!(
                !overlaps(get, &vectors),
                "{object}: vector bytes fetched: {get:?} (vectors at {vectors:?})"
            );
            let in_ids = ids.start <= get.sent.start && get.sent.end <= ids.end;
            assert!(
                get.sent == directory || in_ids,
                "{object}: {get:?} is neither the directory ({directory:?}) nor id pages ({ids:?})"
            );
        }
        for (p, page) in id_pages.iter().enumerate() {
            let needed = hits
                .iter()
                .any(|&h| h >> 32 == u64::from(meta.id) && (h & 0xffff_ffff) as usize / 8192 == p);
            let covered = mine
                .iter()
                .any(|g| g.sent.start <= page.start && page.end <= g.sent.end);
            let touched = mine.iter().any(|g| overlaps(g, page));
            assert_eq!(
                (covered, touched),
                (needed, needed),
                "{object}: id page {p} ({page:?}) holds a hit: {needed}; GETs {mine:?}"
            );
            fetched_pages += usize::from(needed);
        }
        if !hits.iter().any(|&h| h >> 32 == u64::from(meta.id)) {
            // Directories are read while the scan runs, before the hits
            // are known: nothing else of a fragment without hits.
            assert!(
                mine.iter().all(|g| g.sent == directory),
                "{object} has no hit, yet more than its directory was read: {mine:?}"
            );
        }
    }
    fetched_pages
}

#[test]
fn a_search_without_projection_fetches_no_vector_bytes_of_an_indexed_fragment() {
    let dirs = tempfile::tempdir().unwrap();
    let (url, prefix) = ("memory:///cold/noproj", "cold/noproj");
    // Fragment 0 has two id pages (8192 rows each) and several vector
    // pages; fragment 1 one id page.
    let fragments = seeded_rows(23, &[9_000, 2_000]);
    let (store, writer) = indexed_on_store(url, &dirs.path().join("w"), &fragments, 8);
    assert_layout(&writer, true, "written");
    let all: Vec<Row> = fragments.concat();
    // Rows of both id pages of fragment 0 and of fragment 1, and others.
    let mut q: Vec<Vec<f32>> = [40, 4_000, 8_500, 8_999, 10_500]
        .iter()
        .map(|&i| all[i].vector.clone())
        .collect();
    q.extend(queries(&fragments));
    let local = local_paged(&dirs.path().join("local"), &fragments, 8);

    let cold = session_on(&store, url, &dirs.path().join("r"), FragmentLayout::Paged);
    let ds = cold.open(url).unwrap();
    let batch = BatchQuery::new(q, 10).nprobes(3);
    store.clear();
    let io_before = cold.disk_cache().io();
    let (got, profile) = answer(&ds, &batch);
    let log = store.log();
    assert_eq!(got, answer(&local, &batch).0, "store = local");
    assert_eq!(profile.mode, SearchMode::Shared);
    assert!(
        profile.storage_gets > 0 && profile.storage_bytes > 0,
        "{profile:?}"
    );
    assert_eq!(
        profile.storage_gets,
        log.len() as u64,
        "profile counts the store's GETs: {log:#?}"
    );
    let sent: u64 = log.iter().map(|g| g.sent.end - g.sent.start).sum();
    assert_eq!(profile.storage_bytes, sent, "profile counts the bytes sent");
    let io_after = cold.disk_cache().io();
    assert_eq!(io_after.gets - io_before.gets, profile.storage_gets);
    assert_eq!(io_after.bytes - io_before.bytes, profile.storage_bytes);
    let hits: Vec<u64> = got.iter().flatten().map(|h| h.0).collect();
    let pages = assert_fetched_only_hit_id_pages(&store, &ds, prefix, &log, &hits);
    assert_eq!(
        pages, 3,
        "both id pages of fragment 0, the one of fragment 1"
    );

    // Warm: the same search again fetches nothing.
    store.clear();
    let (again, profile) = answer(&ds, &batch);
    assert_eq!(again, got);
    assert_eq!((profile.storage_gets, profile.storage_bytes), (0, 0));
    assert!(store.log().is_empty(), "{:?}", store.log());
    assert_eq!(cold.disk_cache().io(), io_after, "session totals unchanged");

    // Another cold replica, one hit: one id page of one fragment.
    let cold = session_on(&store, url, &dirs.path().join("r2"), FragmentLayout::Paged);
    let ds = cold.open(url).unwrap();
    store.clear();
    let one = BatchQuery::new(vec![all[100].vector.clone()], 1).nprobes(1);
    let (got, _) = answer(&ds, &one);
    assert_eq!(got, answer(&local, &one).0, "store = local");
    let hits: Vec<u64> = got.iter().flatten().map(|h| h.0).collect();
    assert!(hits[0] < 8192, "{hits:?}");
    let pages = assert_fetched_only_hit_id_pages(&store, &ds, prefix, &store.log(), &hits);
    assert_eq!(pages, 1);
}

#[test]
fn adjacent_partitions_of_one_batch_cost_one_get() {
    let dirs = tempfile::tempdir().unwrap();
    let url = "memory:///cold/partitions";
    let fragments = seeded_rows(24, &[1_200]);
    let (store, _) = indexed_on_store(url, &dirs.path().join("w"), &fragments, 8);
    let cold = session_on(&store, url, &dirs.path().join("r"), FragmentLayout::Paged);
    let ds = cold.open(url).unwrap();
    store.clear();
    let (_, profile) = answer(&ds, &BatchQuery::new(queries(&fragments), 5).nprobes(8));
    assert_eq!(profile.mode, SearchMode::Shared);
    assert_eq!(profile.distinct_partitions, 8, "{profile:?}");
    let log = store.log();
    let partition_gets: Vec<&Get> = log
        .iter()
        .filter(|g| g.path.ends_with("/partitions.bin"))
        .collect();
    assert_eq!(partition_gets.len(), 1, "{log:#?}");
    assert!(
        matches!(partition_gets[0].asked, Some(GetRange::Bounded(_))),
        "a ranged GET: {:?}",
        partition_gets[0]
    );
}

/// Flips one byte at `at` of the object, runs an exact search in a fresh
/// session, and returns its error.
fn search_with_flipped_byte(
    store: &Arc<RecordingStore>,
    url: &str,
    object: &str,
    at: usize,
    cache: &Path,
) -> Error {
    let original = store.read(object);
    let mut damaged = original.clone();
    damaged[at] ^= 0x20;
    store.write(object, damaged);
    let ds = session_on(store, url, cache, FragmentLayout::Paged)
        .open(url)
        .unwrap();
    let err = ds
        .search_batch(&BatchQuery::new(vec![vec![0.5; DIM]], 5).mode(SearchMode::Exact))
        .unwrap_err();
    store.write(object, original);
    err
}

#[test]
fn a_damaged_page_is_corrupt_naming_the_file() {
    let dirs = tempfile::tempdir().unwrap();
    let url = "memory:///cold/damaged";
    let fragments = seeded_rows(25, &[1_000]);
    let (store, ds) = indexed_on_store(url, &dirs.path().join("w"), &fragments, 4);
    let meta = ds.manifest().fragments[0].clone();
    let object = format!("cold/damaged/data/{}", meta.file);
    let dir = directory_of(&meta, &store.read(&object));
    let id_page = dir.columns[0].1[0].clone();
    let layout = meta.paged.unwrap();
    let cases = [
        ("id page", (id_page.start + id_page.end) as usize / 2),
        ("directory", (layout.directory_offset + 12) as usize),
    ];
    for (i, (what, at)) in cases.into_iter().enumerate() {
        let err =
            search_with_flipped_byte(&store, url, &object, at, &dirs.path().join(format!("r{i}")));
        match &err {
            Error::Corrupt { path, .. } => assert!(
                path.to_string_lossy().contains(&meta.file),
                "{what}: {err} does not name {}",
                meta.file
            ),
            _ => panic!("{what}: a damaged byte gives {err:?}, not Corrupt"),
        }
    }
    // Undamaged again, a fresh session reads it.
    let ds = session_on(&store, url, &dirs.path().join("ok"), FragmentLayout::Paged)
        .open(url)
        .unwrap();
    let q = BatchQuery::new(vec![vec![0.5; DIM]], 5).mode(SearchMode::Exact);
    assert_eq!(ds.search_batch(&q).unwrap().hits[0].len(), 5);

    // A local paged file: the same.
    let local_dir = dirs.path().join("local");
    let local = local_paged(&local_dir, &fragments, 0);
    let meta = local.manifest().fragments[0].clone();
    let file = local_dir.join("data").join(&meta.file);
    let mut bytes = std::fs::read(&file).unwrap();
    let id_page = directory_of(&meta, &bytes).columns[0].1[0].clone();
    bytes[(id_page.start + 5) as usize] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    let err = Dataset::open(&local_dir)
        .unwrap()
        .search_batch(&q)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if path.ends_with(Path::new("data").join(&meta.file))),
        "{err:?}"
    );
}

#[test]
fn prewarm_fills_the_disk_cache_so_searches_issue_no_get() {
    let dirs = tempfile::tempdir().unwrap();
    let url = "memory:///cold/prewarm";
    let fragments = seeded_rows(26, &[2_000, 1_000]);
    let (store, mut writer) = indexed_on_store(url, &dirs.path().join("w"), &fragments, 8);
    // An unindexed fragment is scanned exactly: prewarm fetches its vectors.
    let more = seeded_rows(27, &[400]).remove(0);
    let more: Vec<Row> = more
        .into_iter()
        .map(|r| Row {
            id: r.id + 3_000,
            ..r
        })
        .collect();
    writer.append([cold_batch(&more)]).unwrap();
    let cold = session_on(&store, url, &dirs.path().join("r"), FragmentLayout::Paged);
    let ds = cold.open(url).unwrap();
    store.clear();
    let report = ds.prewarm(None, &PrewarmPartitions::All).unwrap();
    assert_eq!(report.columns, vec!["emb".to_string()]);
    assert_eq!((report.partitions, report.fragments), (8, 3), "{report:?}");
    assert!(report.gets > 0 && report.bytes > 0, "{report:?}");
    assert_eq!(
        report.gets,
        store.log().len() as u64,
        "the report counts the store's GETs"
    );

    assert!(matches!(
        ds.prewarm(None, &PrewarmPartitions::Only(vec![99_999])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(ds
        .prewarm(Some("category"), &PrewarmPartitions::All)
        .is_err());
    let q = queries(&fragments);
    store.clear();
    for batch in [
        BatchQuery::new(q.clone(), 10).nprobes(8),
        BatchQuery::new(q.clone(), 7).nprobes(3).select(["id"]),
        BatchQuery::new(q.clone(), 3).nprobes(1),
    ] {
        let (results, profile) = ds.explain(&batch).unwrap();
        assert_eq!(profile.mode, SearchMode::Shared);
        assert!(results.hits.iter().all(|h| !h.is_empty()));
        assert_eq!(profile.storage_gets, 0, "{profile:?}");
    }
    assert!(store.log().is_empty(), "after prewarm: {:#?}", store.log());

    // Chosen partitions only, on another cold replica.
    let other = session_on(&store, url, &dirs.path().join("r2"), FragmentLayout::Paged);
    let ds = other.open(url).unwrap();
    let report = ds
        .prewarm(Some("emb"), &PrewarmPartitions::Only(vec![5, 1, 5]))
        .unwrap();
    assert_eq!((report.partitions, report.fragments), (2, 3), "{report:?}");
    assert!(report.gets > 0, "{report:?}");

    // A local dataset has nothing to fetch.
    let local = local_paged(&dirs.path().join("local"), &fragments, 4);
    let report = local.prewarm(None, &PrewarmPartitions::All).unwrap();
    assert_eq!((report.gets, report.bytes), (0, 0), "{report:?}");
}
