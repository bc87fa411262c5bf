//! shoal's C ABI: what a database engine written in C or C++ needs to run
//! batch vector search over a pinned snapshot, split by split.
//!
//! - Handles with explicit lifetimes: a [`ShoalSession`] (caches, scan
//!   threads, config), a [`ShoalDataset`] (one pinned version of a dataset
//!   at a path or URL), a [`ShoalCancel`] (triggered from any thread).
//! - [`shoal_dataset_splits`] cuts the snapshot into splits (one per index
//!   segment, one per unindexed fragment); [`shoal_search`] searches a
//!   matrix of queries over the whole snapshot or one split and returns an
//!   Arrow C stream of `_query_index`, `_rowid`, `_distance` and the
//!   projected columns, ordered by (query, distance, row id);
//!   [`shoal_merge_splits`] merges split results into exactly the whole
//!   search's rows, ties included.
//! - Every call returns a [`ShoalStatus`]; the message of the last failed
//!   call on a thread is [`shoal_last_error`]. No panic crosses the ABI: one
//!   is caught and reported as [`ShoalStatus::Internal`]. Bad input
//!   (null pointers, wrong dimension, NaN, k = 0, limits) is refused before
//!   anything runs.
//!
//! Memory: inputs are borrowed for the duration of a call and copied where
//! kept (query vectors are copied). Outputs are owned by the caller and
//! released with their own functions: handles with their `_close`/`_free`,
//! strings with [`shoal_string_free`], streams with their `release`
//! callback, as the Arrow C stream interface says.

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{
    Array, ArrayRef, Float32Array, RecordBatch, RecordBatchIterator, RecordBatchReader,
    UInt32Array, UInt64Array,
};
use arrow_schema::{ArrowError, DataType, Field, Schema as ArrowSchema};
use shoal::{
    BatchQuery, CancelToken, Config, Dataset, Error, ErrorKind, Hit, Metric, Nprobes,
    PerQueryParams, SearchMode, SearchResults, Session,
};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The Arrow C stream struct of `arrow_c_stream.h` (the Arrow C stream
/// interface), as the ABI names it; shoal fills one (`out`) or takes one
/// over (`parts`) as `arrow-rs`'s `FFI_ArrowArrayStream`, which has its
/// layout.
#[repr(C)]
pub struct ArrowArrayStream {
    _opaque: [u8; 0],
}

fn stream_ptr(p: *mut ArrowArrayStream) -> *mut FFI_ArrowArrayStream {
    p.cast()
}

/// What a call did. `SHOAL_STATUS_OK` is zero; every other value comes with
/// a message in [`shoal_last_error`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShoalStatus {
    /// Success.
    Ok = 0,
    /// The input is wrong (null pointer, dimension, NaN, k = 0, a limit, an
    /// unknown column, a bad filter, a fragment not in the snapshot).
    InvalidArgument = 1,
    /// A dataset or version that does not exist.
    NotFound = 2,
    /// Another writer won a race (not returned by searches).
    Conflict = 3,
    /// Too busy; retry later.
    Overloaded = 4,
    /// The call's [`ShoalCancel`] was triggered.
    Cancelled = 5,
    /// A deadline passed.
    DeadlineExceeded = 6,
    /// Object storage could not be reached.
    Unavailable = 7,
    /// I/O, corruption, or a bug in shoal (a caught panic included).
    Internal = 8,
}

impl From<&Error> for ShoalStatus {
    fn from(e: &Error) -> Self {
        match e.kind() {
            ErrorKind::InvalidInput => ShoalStatus::InvalidArgument,
            ErrorKind::NotFound => ShoalStatus::NotFound,
            ErrorKind::Conflict => ShoalStatus::Conflict,
            ErrorKind::Overloaded => ShoalStatus::Overloaded,
            ErrorKind::Cancelled => ShoalStatus::Cancelled,
            ErrorKind::DeadlineExceeded => ShoalStatus::DeadlineExceeded,
            ErrorKind::Unavailable => ShoalStatus::Unavailable,
            _ => ShoalStatus::Internal,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// The message of the last call on this thread that did not return
/// `SHOAL_STATUS_OK` (empty when none has failed). The pointer stays valid
/// until the next shoal call on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn shoal_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// A failure before shoal's own checks: a null or malformed argument.
fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidArgument(message.into())
}

/// Runs `body`, turning an error or a panic into a status and this
/// thread's last error.
fn guarded(body: impl FnOnce() -> Result<(), Error>) -> ShoalStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ShoalStatus::Ok,
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            ShoalStatus::from(&e)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!(
                "internal error (a panic in shoal, caught): {what}"
            ));
            ShoalStatus::Internal
        }
    }
}

/// A C string argument: `None` for null, an error for invalid UTF-8.
unsafe fn opt_str<'a>(ptr: *const c_char, what: &str) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes a NUL-terminated string (the ABI's rule).
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map(Some)
        .map_err(|_| invalid(format!("{what} is not valid UTF-8")))
}

unsafe fn req_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    unsafe { opt_str(ptr, what) }?.ok_or_else(|| invalid(format!("{what} is a null pointer")))
}

fn out_ptr<T>(out: *mut T, what: &str) -> Result<(), Error> {
    if out.is_null() {
        Err(invalid(format!("{what} is a null pointer")))
    } else {
        Ok(())
    }
}

/// A session: the caches, scan threads and config that datasets opened in
/// it share. One per process is the intended use.
pub struct ShoalSession(Session);

/// One version of a dataset, pinned: every search through it sees that
/// version, whatever is committed later.
pub struct ShoalDataset(Dataset);

/// A cancellation flag that any thread may trigger; a search given it
/// stops within one partition and returns `SHOAL_STATUS_CANCELLED`.
pub struct ShoalCancel(CancelToken);

/// Opens a session. `config_toml` is the text of a shoal TOML config
/// (`config/default.toml` lists every key), or null for the defaults.
///
/// # Safety
///
/// `config_toml` is null or a NUL-terminated string; `out` is null or
/// points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn shoal_session_open(
    config_toml: *const c_char,
    out: *mut *mut ShoalSession,
) -> ShoalStatus {
    guarded(|| {
        out_ptr(out, "out")?;
        let config = match unsafe { opt_str(config_toml, "config_toml") }? {
            Some(text) => Config::from_toml_str(text)?,
            None => Config::default(),
        };
        let session = Box::new(ShoalSession(Session::new(config)));
        // SAFETY: `out` is non-null (checked) and points to writable memory.
        unsafe { *out = Box::into_raw(session) };
        Ok(())
    })
}

/// Closes a session (null is ignored). Datasets opened in it stay usable
/// until they are closed themselves.
///
/// # Safety
///
/// `session` is null or a handle from [`shoal_session_open`] not closed
/// before.
#[no_mangle]
pub unsafe extern "C" fn shoal_session_close(session: *mut ShoalSession) {
    if !session.is_null() {
        // SAFETY: made by `shoal_session_open`, closed once (the ABI's rule).
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(session) })));
    }
}

/// Opens the dataset at `uri` (a path, or a `file://`, `memory://`,
/// `s3://`, `gs://` or `az://` URL) pinned to `version`, or to the latest
/// version when `version` is negative.
///
/// # Safety
///
/// `session` is null or a live session; `uri` is null or a NUL-terminated
/// string; `out` is null or points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn shoal_dataset_open(
    session: *const ShoalSession,
    uri: *const c_char,
    version: i64,
    out: *mut *mut ShoalDataset,
) -> ShoalStatus {
    guarded(|| {
        out_ptr(out, "out")?;
        // SAFETY: a live session from `shoal_session_open`, or null.
        let session =
            unsafe { session.as_ref() }.ok_or_else(|| invalid("session is a null pointer"))?;
        let uri = unsafe { req_str(uri, "uri") }?;
        let latest = session.0.open(uri)?;
        let dataset = match u64::try_from(version) {
            Ok(v) => latest.checkout(v)?,
            Err(_) => latest,
        };
        // SAFETY: `out` is non-null (checked).
        unsafe { *out = Box::into_raw(Box::new(ShoalDataset(dataset))) };
        Ok(())
    })
}

/// Closes a dataset (null is ignored).
///
/// # Safety
///
/// `dataset` is null or a handle from [`shoal_dataset_open`] not closed
/// before.
#[no_mangle]
pub unsafe extern "C" fn shoal_dataset_close(dataset: *mut ShoalDataset) {
    if !dataset.is_null() {
        // SAFETY: made by `shoal_dataset_open`, closed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(dataset) })));
    }
}

/// The pinned version number (0 for a null dataset).
///
/// # Safety
///
/// `dataset` is null or a live dataset.
#[no_mangle]
pub unsafe extern "C" fn shoal_dataset_version(dataset: *const ShoalDataset) -> u64 {
    // SAFETY: a live dataset or null.
    unsafe { dataset.as_ref() }.map_or(0, |d| d.0.version())
}

/// Rows in the pinned version that are not deleted (0 for a null dataset).
///
/// # Safety
///
/// `dataset` is null or a live dataset.
#[no_mangle]
pub unsafe extern "C" fn shoal_dataset_count_rows(dataset: *const ShoalDataset) -> u64 {
    // SAFETY: a live dataset or null.
    unsafe { dataset.as_ref() }.map_or(0, |d| d.0.count_rows())
}

/// One split: fragments that one index segment covers, or one fragment no
/// segment covers.
#[repr(C)]
pub struct ShoalSplit {
    /// Its fragment ids, ascending (pass them to `ShoalSearchOptions.split`).
    pub fragment_ids: *const u32,
    /// How many.
    pub fragment_count: usize,
    /// Rows that are not deleted.
    pub rows: u64,
    /// 1 when an index segment covers the split, 0 when it is scanned
    /// exactly.
    pub indexed: i32,
}

/// A snapshot's splits, from [`shoal_dataset_splits`]; free with
/// [`shoal_split_list_free`].
#[repr(C)]
pub struct ShoalSplitList {
    /// The splits.
    pub splits: *const ShoalSplit,
    /// How many.
    pub count: usize,
}

/// What a split list owns behind its C view.
struct SplitListOwner {
    list: ShoalSplitList,
    _ids: Vec<Vec<u32>>,
    _splits: Vec<ShoalSplit>,
}

/// The pinned version's splits for vector column `column` (null: the only
/// vector column): disjoint, covering every fragment. Searching each one
/// (`ShoalSearchOptions.split`) and merging with [`shoal_merge_splits`]
/// gives the whole snapshot's answer.
///
/// # Safety
///
/// `dataset` is null or a live dataset; `column` is null or a
/// NUL-terminated string; `out` is null or points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn shoal_dataset_splits(
    dataset: *const ShoalDataset,
    column: *const c_char,
    out: *mut *mut ShoalSplitList,
) -> ShoalStatus {
    guarded(|| {
        out_ptr(out, "out")?;
        // SAFETY: a live dataset or null.
        let dataset =
            unsafe { dataset.as_ref() }.ok_or_else(|| invalid("dataset is a null pointer"))?;
        let column = unsafe { opt_str(column, "column") }?;
        let splits = dataset.0.splits(column)?;
        let ids: Vec<Vec<u32>> = splits.iter().map(|s| s.fragments.clone()).collect();
        let views: Vec<ShoalSplit> = splits
            .iter()
            .zip(&ids)
            .map(|(s, ids)| ShoalSplit {
                fragment_ids: ids.as_ptr(),
                fragment_count: ids.len(),
                rows: s.rows,
                indexed: i32::from(s.segment.is_some()),
            })
            .collect();
        let mut owner = Box::new(SplitListOwner {
            list: ShoalSplitList {
                splits: std::ptr::null(),
                count: views.len(),
            },
            _ids: ids,
            _splits: views,
        });
        owner.list.splits = owner._splits.as_ptr();
        // The C caller gets the address of the `list` field; the owner is
        // found from it again by the field's offset when freed.
        let raw = Box::into_raw(owner);
        // SAFETY: `out` is non-null (checked); `list` lives as long as `raw`.
        unsafe { *out = std::ptr::addr_of_mut!((*raw).list) };
        Ok(())
    })
}

/// Frees a split list (null is ignored).
///
/// # Safety
///
/// `list` is null or a list from [`shoal_dataset_splits`] not freed
/// before.
#[no_mangle]
pub unsafe extern "C" fn shoal_split_list_free(list: *mut ShoalSplitList) {
    if !list.is_null() {
        // SAFETY: `list` is the `list` field of a boxed `SplitListOwner`
        // (made by `shoal_dataset_splits`), freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { free_split_list(list) }));
    }
}

unsafe fn free_split_list(list: *mut ShoalSplitList) {
    let offset = std::mem::offset_of!(SplitListOwner, list);
    // SAFETY: `list` was made as `&mut (*owner).list`; stepping back by the
    // field's offset gives the box's address.
    let owner = unsafe { (list as *mut u8).sub(offset) } as *mut SplitListOwner;
    drop(unsafe { Box::from_raw(owner) });
}

/// A cancellation handle, not triggered.
#[no_mangle]
pub extern "C" fn shoal_cancel_new() -> *mut ShoalCancel {
    Box::into_raw(Box::new(ShoalCancel(CancelToken::new())))
}

/// Triggers `cancel` (null is ignored): searches using it stop and return
/// `SHOAL_STATUS_CANCELLED`, now and from then on. Safe from any thread,
/// while another thread searches with it.
///
/// # Safety
///
/// `cancel` is null or a live handle from [`shoal_cancel_new`].
#[no_mangle]
pub unsafe extern "C" fn shoal_cancel_trigger(cancel: *const ShoalCancel) {
    // SAFETY: a live handle or null.
    if let Some(c) = unsafe { cancel.as_ref() } {
        c.0.cancel();
    }
}

/// Frees a cancellation handle (null is ignored); no search may still be
/// using it.
///
/// # Safety
///
/// `cancel` is null or a handle from [`shoal_cancel_new`] not freed before,
/// that no running search still uses.
#[no_mangle]
pub unsafe extern "C" fn shoal_cancel_free(cancel: *mut ShoalCancel) {
    if !cancel.is_null() {
        // SAFETY: made by `shoal_cancel_new`, freed once.
        drop(unsafe { Box::from_raw(cancel) });
    }
}

/// Options of [`shoal_search`]; start from [`shoal_search_options_default`]
/// and set what differs. Pointers are borrowed for the call.
#[repr(C)]
pub struct ShoalSearchOptions {
    /// Vector column; null: the dataset's only one.
    pub column: *const c_char,
    /// `"l2"`, `"cosine"` or `"dot"`; null: the column's. An index built
    /// for another metric is refused, not searched with wrong distances.
    pub metric: *const c_char,
    /// SQL filter on scalar columns (`category = 'noun' AND len < 20`),
    /// applied before ranking; null: none.
    pub filter: *const c_char,
    /// Rows per query (at least 1; default 10).
    pub k: u32,
    /// Best rows skipped per query (default 0). In a split search the
    /// offset is not applied: each query returns `k + offset` rows, and
    /// [`shoal_merge_splits`] pages.
    pub offset: u32,
    /// IVF partitions probed per query; 0: the default (20).
    pub nprobes: u32,
    /// Candidates a graph walk keeps per query (`hnsw` indexes; at least
    /// k); 0: the default (64).
    pub ef: u32,
    /// Nonzero: search exactly, without the index.
    pub exact: i32,
    /// The split searched (fragment ids from [`shoal_dataset_splits`]);
    /// null: the whole snapshot.
    pub split: *const u32,
    /// How many ids `split` holds.
    pub split_len: usize,
    /// Columns projected into the output, after the three fixed ones.
    pub project: *const *const c_char,
    /// How many names `project` holds.
    pub project_len: usize,
    /// Stops the search when triggered; null: not cancellable.
    pub cancel: *const ShoalCancel,
}

/// The default options: k 10, offset 0, default nprobes and ef, no filter, no
/// projection, the whole snapshot.
#[no_mangle]
pub extern "C" fn shoal_search_options_default() -> ShoalSearchOptions {
    ShoalSearchOptions {
        column: std::ptr::null(),
        metric: std::ptr::null(),
        filter: std::ptr::null(),
        k: 10,
        offset: 0,
        nprobes: 0,
        ef: 0,
        exact: 0,
        split: std::ptr::null(),
        split_len: 0,
        project: std::ptr::null(),
        project_len: 0,
        cancel: std::ptr::null(),
    }
}

/// Searches `n` queries (`queries`: `n × dim` floats, row-major, copied)
/// over the pinned version, or one split of it, in one shared scan. On
/// success `*out` is an Arrow C stream of record batches with the columns
/// `_query_index` (uint32), `_rowid` (uint64), `_distance` (float32) and
/// the projected columns, ordered by (query index, distance, row id); the
/// caller releases it. When `explain_json` is not null, `*explain_json` is
/// set to the search's profile as JSON (mode and fallback reason, queries,
/// prefilter builds, distinct partitions, rows scored, times), freed with
/// [`shoal_string_free`]. On failure nothing is written to `out`.
///
/// # Safety
///
/// `dataset` is null or a live dataset; `queries` is null or holds
/// `n × dim` floats; `options` is null or valid, its strings null or
/// NUL-terminated and its arrays holding their lengths; `out` is null or
/// points to a writable `ArrowArrayStream`; `explain_json` is null or
/// points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn shoal_search(
    dataset: *const ShoalDataset,
    queries: *const f32,
    n: usize,
    dim: usize,
    options: *const ShoalSearchOptions,
    out: *mut ArrowArrayStream,
    explain_json: *mut *mut c_char,
) -> ShoalStatus {
    guarded(|| {
        out_ptr(out, "out")?;
        // SAFETY: a live dataset or null.
        let dataset =
            unsafe { dataset.as_ref() }.ok_or_else(|| invalid("dataset is a null pointer"))?;
        let default = shoal_search_options_default();
        // SAFETY: null or a valid options struct.
        let options = unsafe { options.as_ref() }.unwrap_or(&default);
        if dim == 0 {
            return Err(invalid("dim must be at least 1"));
        }
        if queries.is_null() {
            return Err(invalid("queries is a null pointer"));
        }
        let floats = n
            .checked_mul(dim)
            .ok_or_else(|| invalid("n × dim overflows"))?;
        // The search checks the batch limit too; checking it first spares
        // copying an oversized matrix.
        let limit = dataset.0.config().limits.max_batch_size;
        if n > limit {
            return Err(Error::LimitExceeded {
                what: "batch size",
                value: n,
                max: limit,
            });
        }
        // SAFETY: the caller passes `n × dim` readable floats.
        let flat = unsafe { std::slice::from_raw_parts(queries, floats) };
        let batch = build_batch(flat, n, dim, options)?;
        let (results, profile) = dataset.0.explain(&batch)?;
        let record = results_to_batch(dataset.0.schema(), &results)?;
        let explain = match explain_json.is_null() {
            true => None,
            false => Some(
                CString::new(
                    serde_json::to_string(&profile).map_err(|e| Error::Internal(e.to_string()))?,
                )
                .map_err(|e| Error::Internal(e.to_string()))?,
            ),
        };
        let schema = record.schema();
        let stream = FFI_ArrowArrayStream::new(Box::new(RecordBatchIterator::new(
            [Ok::<_, ArrowError>(record)],
            schema,
        )));
        // SAFETY: `out` is non-null and points to a stream struct to fill.
        unsafe { std::ptr::write(stream_ptr(out), stream) };
        if let Some(text) = explain {
            // SAFETY: non-null (checked).
            unsafe { *explain_json = text.into_raw() };
        }
        Ok(())
    })
}

fn build_batch(
    flat: &[f32],
    n: usize,
    dim: usize,
    o: &ShoalSearchOptions,
) -> Result<BatchQuery, Error> {
    let vectors: Vec<Vec<f32>> = flat.chunks_exact(dim).map(|c| c.to_vec()).collect();
    debug_assert_eq!(vectors.len(), n);
    let mut batch = BatchQuery::new(vectors, o.k as usize);
    batch.offset = shoal::PerQuery::All(o.offset as usize);
    let mut own = PerQueryParams {
        filter: unsafe { opt_str(o.filter, "filter") }?.map(String::from),
        ..PerQueryParams::default()
    };
    if o.nprobes > 0 {
        own.nprobes = Some(Nprobes::Fixed(o.nprobes as usize));
    }
    if o.ef > 0 {
        own.ef = Some(o.ef as usize);
    }
    if o.project_len > 0 {
        if o.project.is_null() {
            return Err(invalid("project is a null pointer with project_len > 0"));
        }
        // SAFETY: `project_len` string pointers.
        let names = unsafe { std::slice::from_raw_parts(o.project, o.project_len) };
        for (i, name) in names.iter().enumerate() {
            own.projection
                .push(unsafe { req_str(*name, &format!("project[{i}]")) }?.to_string());
        }
    }
    batch.own = shoal::PerQuery::All(own);
    batch.shared.column = unsafe { opt_str(o.column, "column") }?.map(String::from);
    if let Some(m) = unsafe { opt_str(o.metric, "metric") }? {
        batch.shared.metric = Some(
            Metric::parse(m)
                .ok_or_else(|| invalid(format!("unknown metric '{m}' (l2, cosine or dot)")))?,
        );
    }
    if o.exact != 0 {
        batch.shared.mode = SearchMode::Exact;
    }
    if !o.split.is_null() || o.split_len > 0 {
        if o.split.is_null() {
            return Err(invalid("split is a null pointer with split_len > 0"));
        }
        // SAFETY: `split_len` ids.
        let ids = unsafe { std::slice::from_raw_parts(o.split, o.split_len) };
        batch.shared.split = Some(ids.to_vec());
    }
    // SAFETY: a live handle or null.
    if let Some(c) = unsafe { o.cancel.as_ref() } {
        batch.cancel = Some(c.0.clone());
    }
    Ok(batch)
}

const QUERY_INDEX: &str = "_query_index";
const ROW_ID: &str = "_rowid";
const DISTANCE: &str = "_distance";

/// The rows of every query as one record batch, in query order (each
/// query's rows are already by distance, then row id): the fixed columns,
/// then the projected ones.
fn results_to_batch(schema: &shoal::Schema, results: &SearchResults) -> Result<RecordBatch, Error> {
    let rows: Vec<(u32, &Hit)> = results.rows().map(|(qi, h)| (qi as u32, h)).collect();
    let mut fields = vec![
        Field::new(QUERY_INDEX, DataType::UInt32, false),
        Field::new(ROW_ID, DataType::UInt64, false),
        Field::new(DISTANCE, DataType::Float32, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.1.row_id),
        )),
        Arc::new(Float32Array::from_iter_values(
            rows.iter().map(|r| r.1.distance),
        )),
    ];
    for (field, array) in results.projected_arrays(schema)? {
        fields.push(field);
        columns.push(array);
    }
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns)
        .map_err(|e| Error::Internal(e.to_string()))
}

/// Merges the outputs of split searches (`parts`: `n_parts` streams, as
/// [`shoal_search`] returns them with a split, each query's best
/// `k + offset` rows) into each query's best rows by (distance, row id)
/// with `offset` skipped and at most `k` kept — for disjoint splits
/// covering the snapshot, exactly the rows of searching the whole snapshot
/// with `k` and `offset`, ties included. Takes ownership of every part
/// stream (released on success and on failure). `*out` gets one stream of
/// the same columns, ordered by (query index, distance, row id).
///
/// # Safety
///
/// `parts` is null or holds `n_parts` stream structs (each live or
/// released); `out` is null or points to a writable `ArrowArrayStream`.
#[no_mangle]
pub unsafe extern "C" fn shoal_merge_splits(
    parts: *mut ArrowArrayStream,
    n_parts: usize,
    k: u32,
    offset: u32,
    out: *mut ArrowArrayStream,
) -> ShoalStatus {
    // Every part is taken first, so that each is released whatever fails.
    let taken: Vec<FFI_ArrowArrayStream> = if parts.is_null() {
        Vec::new()
    } else {
        (0..n_parts)
            // SAFETY: `n_parts` stream structs; `from_raw` moves each out
            // and leaves a released one behind.
            .map(|i| unsafe { FFI_ArrowArrayStream::from_raw(stream_ptr(parts).add(i)) })
            .collect()
    };
    guarded(move || {
        out_ptr(out, "out")?;
        if parts.is_null() && n_parts > 0 {
            return Err(invalid("parts is a null pointer with n_parts > 0"));
        }
        if k == 0 {
            return Err(invalid("k must be at least 1"));
        }
        let arrow = |e: ArrowError| invalid(format!("a part is not a shoal search stream: {e}"));
        let mut batches = Vec::new();
        let mut schema = None;
        for stream in taken {
            let reader = RecordBatchStreamReader::try_new(stream).map_err(arrow)?;
            let part_schema = reader.schema();
            match &schema {
                None => schema = Some(part_schema),
                Some(s) if s.fields() != part_schema.fields() => {
                    return Err(invalid("parts have different columns"));
                }
                Some(_) => {}
            }
            for b in reader {
                batches.push(b.map_err(arrow)?);
            }
        }
        let schema = schema.unwrap_or_else(|| {
            Arc::new(ArrowSchema::new(vec![
                Field::new(QUERY_INDEX, DataType::UInt32, false),
                Field::new(ROW_ID, DataType::UInt64, false),
                Field::new(DISTANCE, DataType::Float32, false),
            ]))
        });
        let all = arrow_select::concat::concat_batches(&schema, &batches).map_err(arrow)?;
        let column = |name: &str| {
            all.column_by_name(name)
                .ok_or_else(|| invalid(format!("a part has no {name} column")))
        };
        let qi = column(QUERY_INDEX)?
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or_else(|| invalid("_query_index is not uint32"))?
            .clone();
        let row = column(ROW_ID)?
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| invalid("_rowid is not uint64"))?
            .clone();
        let dist = column(DISTANCE)?
            .as_any()
            .downcast_ref::<Float32Array>()
            .ok_or_else(|| invalid("_distance is not float32"))?
            .clone();
        let mut order: Vec<u32> = (0..all.num_rows() as u32).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            qi.value(a)
                .cmp(&qi.value(b))
                .then(dist.value(a).total_cmp(&dist.value(b)))
                .then(row.value(a).cmp(&row.value(b)))
        });
        let mut keep = Vec::with_capacity(order.len());
        let mut at = 0;
        while at < order.len() {
            let q = qi.value(order[at] as usize);
            let mut end = at;
            while end < order.len() && qi.value(order[end] as usize) == q {
                end += 1;
            }
            keep.extend(
                order[at..end]
                    .iter()
                    .skip(offset as usize)
                    .take(k as usize)
                    .copied(),
            );
            at = end;
        }
        let indices = UInt32Array::from(keep);
        let columns = all
            .columns()
            .iter()
            .map(|c| arrow_select::take::take(c.as_ref(), &indices, None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Internal(e.to_string()))?;
        let merged = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let stream = FFI_ArrowArrayStream::new(Box::new(RecordBatchIterator::new(
            [Ok::<_, ArrowError>(merged)],
            schema,
        )));
        // SAFETY: `out` is non-null (checked).
        unsafe { std::ptr::write(stream_ptr(out), stream) };
        Ok(())
    })
}

/// Frees a string shoal returned (null is ignored).
///
/// # Safety
///
/// `text` is null or a string shoal returned, not freed before.
#[no_mangle]
pub unsafe extern "C" fn shoal_string_free(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: made by `CString::into_raw` in this library, freed once.
        drop(unsafe { CString::from_raw(text) });
    }
}

/// The library's version, a static string.
#[no_mangle]
pub extern "C" fn shoal_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_internal_error_with_a_message() {
        let status = guarded(|| panic!("boom {}", 7));
        assert_eq!(status, ShoalStatus::Internal);
        // SAFETY: the thread's last error, valid until the next call.
        let message = unsafe { CStr::from_ptr(shoal_last_error()) }
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains("panic") && message.contains("boom 7"),
            "{message}"
        );
        assert_eq!(guarded(|| Ok(())), ShoalStatus::Ok);
    }

    #[test]
    fn errors_map_to_their_status() {
        assert_eq!(guarded(|| Err(Error::Cancelled)), ShoalStatus::Cancelled);
        assert_eq!(guarded(|| Err(invalid("x"))), ShoalStatus::InvalidArgument);
        assert_eq!(
            guarded(|| Err(Error::Internal("y".into()))),
            ShoalStatus::Internal
        );
    }
}
