//! Reading paged fragment files (see [`crate::storage::paged`]): the
//! directory once per session, whole columns as one run of pages, single
//! rows as the pages that hold them, each page cached on its own.

use super::{ColumnData, ColumnKey, FragmentView, Part};
use crate::error::{Error, Result};
use crate::kernel::VectorBlocks;
use crate::storage::paged::{decode_page, PageDirectory};
use crate::storage::schema::ColumnType;
use arrow_array::{ArrayRef, RecordBatch};
use std::sync::Arc;

/// Columns at chosen rows: per column asked, per row asked, the loaded
/// data holding the row (one page, or the whole column when it is in
/// memory already) and the row's place in it.
pub type TakenRows = Vec<Vec<(ColumnData, usize)>>;

/// Pages of one fragment asked for in one read: (column, page).
type PageIds = [(usize, usize)];

impl FragmentView {
    /// The page directory of a paged file (`None`: an Arrow IPC file),
    /// read once per session through the column cache.
    pub(super) fn directory(&self) -> Result<Option<Arc<PageDirectory>>> {
        let Some(layout) = self.meta.paged else {
            return Ok(None);
        };
        let key: ColumnKey = (self.path.clone(), Part::Directory);
        let data = self.columns.cache.try_get_with(key, || {
            self.check_length(layout.directory_offset + layout.directory_len)?;
            let bytes = self
                .read_ranges(&[(layout.directory_offset, layout.directory_len)])?
                .pop()
                .ok_or_else(|| Error::Internal("directory read returned nothing".into()))?;
            PageDirectory::decode(&self.path, &bytes, &layout, self.meta.rows, &self.schema)
                .map(|d| ColumnData::Directory(Arc::new(d)))
        });
        match data.map_err(|e: Arc<Error>| (*e).clone())? {
            ColumnData::Directory(d) => Ok(Some(d)),
            _ => Err(Error::Internal(
                "page directory cache entry of wrong kind".into(),
            )),
        }
    }

    /// The directory ends the file: the manifest's recorded length and
    /// (a local file) the file's own must be `end`. Bytes appended to a
    /// remote object lie outside every page and are never read.
    fn check_length(&self, end: u64) -> Result<()> {
        let corrupt = |m: String| Error::corrupt(&*self.path, m);
        if let Some(recorded) = self.meta.checksum.map(|c| c.bytes) {
            if recorded != end {
                return Err(corrupt(format!(
                    "the manifest records {recorded} bytes but places the page directory's end at {end}"
                )));
            }
        }
        if self.root.remote_side().is_none() {
            let len = std::fs::metadata(&*self.path)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => corrupt("fragment file is missing".into()),
                    _ => Error::io(&*self.path, e),
                })?
                .len();
            if len != end {
                return Err(corrupt(format!(
                    "file has {len} bytes, the manifest records {end}"
                )));
            }
        }
        Ok(())
    }

    /// Reads the page directory into memory now (a remote paged file not
    /// read yet), so that a search's hits later need one round trip, not
    /// two. Errors are left to the read that needs the directory.
    pub fn warm_directory(&self) {
        if self.directory_unread() {
            let _ = self.directory();
        }
    }

    /// Is this a remote paged file whose directory is not in memory?
    pub fn directory_unread(&self) -> bool {
        self.meta.paged.is_some()
            && self.root.remote_side().is_some()
            && !self
                .columns
                .cache
                .contains_key(&(self.path.clone(), Part::Directory))
    }

    /// Byte ranges of the file, in order (on object storage: adjacent
    /// ones in one GET, several GETs at once, each range kept in the disk
    /// cache).
    fn read_ranges(&self, ranges: &[(u64, u64)]) -> Result<Vec<Vec<u8>>> {
        self.root
            .read_ranges(&self.rel, ranges)?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    Error::corrupt(&*self.path, "fragment file is missing")
                }
                std::io::ErrorKind::UnexpectedEof => {
                    Error::corrupt(&*self.path, "fragment file is truncated")
                }
                _ => Error::io(&*self.path, e),
            })
    }

    /// The pages `wanted`, read in one call, checked and decoded.
    fn read_pages(&self, directory: &PageDirectory, wanted: &PageIds) -> Result<Vec<ArrayRef>> {
        let page = |c: usize, p: usize| {
            directory.columns[c].pages.get(p).ok_or_else(|| {
                Error::corrupt(
                    &*self.path,
                    format!("row beyond the {} rows of the fragment", directory.rows),
                )
            })
        };
        let mut ranges = Vec::with_capacity(wanted.len());
        for &(c, p) in wanted {
            let pg = page(c, p)?;
            ranges.push((pg.offset, u64::from(pg.len)));
        }
        let arrow = self.schema.arrow_schema();
        let bytes = self.read_ranges(&ranges)?;
        wanted
            .iter()
            .zip(bytes)
            .map(|(&(c, p), b)| {
                let column = &directory.columns[c];
                decode_page(
                    &self.path,
                    &self.schema.columns[c].name,
                    page(c, p)?,
                    &b,
                    column.rows_in(p, directory.rows),
                    arrow.field(c),
                )
            })
            .collect()
    }

    fn column_index(&self, name: &str) -> Result<usize> {
        self.schema
            .columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| Error::Internal(format!("no column '{name}' in the schema")))
    }

    /// One page as cached data: a vector page block-transposed, a scalar
    /// page as its array.
    fn page_data(&self, c: usize, array: &ArrayRef) -> Result<ColumnData> {
        Ok(match self.schema.columns[c].ty {
            ColumnType::Vector { dim, .. } => {
                let name = &self.schema.columns[c].name;
                let rows = vector_rows_of(self, name, dim, array)?;
                ColumnData::Vectors(Arc::new(VectorBlocks::from_rows(dim, rows)))
            }
            _ => ColumnData::Scalars(array.clone()),
        })
    }

    /// Whole columns `names` of a paged file: every page of each, in one
    /// read (one run of adjacent pages per column).
    pub(super) fn read_paged_columns(
        &self,
        directory: &PageDirectory,
        names: &[&str],
    ) -> Result<Vec<ColumnData>> {
        let mut wanted = Vec::new();
        let mut columns = Vec::with_capacity(names.len());
        for name in names {
            let c = self.column_index(name)?;
            columns.push(c);
            wanted.extend((0..directory.columns[c].pages.len()).map(|p| (c, p)));
        }
        let mut pages = self.read_pages(directory, &wanted)?.into_iter();
        let arrow = self.schema.arrow_schema();
        let mut out = Vec::with_capacity(names.len());
        for (&c, name) in columns.iter().zip(names) {
            let arrays: Vec<ArrayRef> = pages
                .by_ref()
                .take(directory.columns[c].pages.len())
                .collect();
            out.push(match self.schema.columns[c].ty {
                ColumnType::Vector { dim, .. } => {
                    let mut blocks = VectorBlocks::new(dim);
                    for a in &arrays {
                        blocks.extend_from_rows(vector_rows_of(self, name, dim, a)?);
                    }
                    ColumnData::Vectors(Arc::new(blocks))
                }
                _ => ColumnData::Scalars(super::ipc::owned_concat(
                    &arrays,
                    arrow.field(c).data_type(),
                )?),
            });
        }
        Ok(out)
    }

    /// Every row of a paged file, every column, as one record batch (read
    /// from the file, not through the cache).
    pub(super) fn whole_batch(&self, directory: &PageDirectory) -> Result<RecordBatch> {
        let arrow = self.schema.arrow_schema();
        let wanted: Vec<(usize, usize)> = (0..self.schema.columns.len())
            .flat_map(|c| (0..directory.columns[c].pages.len()).map(move |p| (c, p)))
            .collect();
        let mut pages = self.read_pages(directory, &wanted)?.into_iter();
        let mut columns = Vec::with_capacity(self.schema.columns.len());
        for (c, column) in directory.columns.iter().enumerate() {
            let arrays: Vec<ArrayRef> = pages.by_ref().take(column.pages.len()).collect();
            columns.push(super::ipc::owned_concat(
                &arrays,
                arrow.field(c).data_type(),
            )?);
        }
        Ok(RecordBatch::try_new(arrow, columns)?)
    }

    /// Streams the vector column `name` of a paged file page by page (a
    /// few dozen pages per read), as row-major floats.
    pub(super) fn for_each_vector_page(
        &self,
        directory: &PageDirectory,
        name: &str,
        mut f: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        let c = self.column_index(name)?;
        let ColumnType::Vector { dim, .. } = self.schema.columns[c].ty else {
            return Err(Error::Internal(format!("'{name}' is not a vector column")));
        };
        let pages = directory.columns[c].pages.len();
        let mut offset = 0usize;
        let mut first = 0usize;
        while first < pages {
            let last = (first + 32).min(pages);
            let wanted: Vec<(usize, usize)> = (first..last).map(|p| (c, p)).collect();
            for array in self.read_pages(directory, &wanted)? {
                let rows = vector_rows_of(self, name, dim, &array)?;
                f(offset, rows)?;
                offset += array.len();
            }
            first = last;
        }
        Ok(())
    }

    /// Fetches the columns `names` into the disk cache, loading nothing
    /// into memory: their pages (a paged file) or the whole file (Arrow
    /// IPC). Nothing to do for a local dataset.
    pub fn prefetch(&self, names: &[&str]) -> Result<()> {
        if self.root.remote_side().is_none() {
            return Ok(());
        }
        let Some(directory) = self.directory()? else {
            self.open_file()?;
            return Ok(());
        };
        let mut ranges = Vec::new();
        for name in names {
            let c = self.column_index(name)?;
            ranges.extend(
                directory.columns[c]
                    .pages
                    .iter()
                    .map(|p| (p.offset, u64::from(p.len))),
            );
        }
        if !self.root.prefetch_ranges(&self.rel, &ranges)? {
            return Err(Error::corrupt(&*self.path, "fragment file is missing"));
        }
        Ok(())
    }

    /// Columns `names` at rows `offsets`: from a whole column already in
    /// memory, else from the pages holding those rows (kept in the
    /// column's [`PageTable`]; the missing ones of every column read in
    /// one call). An Arrow IPC file loads the whole columns.
    pub fn take(&self, names: &[&str], offsets: &[usize]) -> Result<TakenRows> {
        let Some(directory) = self.directory()? else {
            return Ok(self
                .columns(names)?
                .into_iter()
                .map(|d| offsets.iter().map(|&o| (d.clone(), o)).collect())
                .collect());
        };
        // Per name: the whole column, or the column's page table.
        let mut sources: Vec<Result<ColumnData, Arc<PageTable>>> = Vec::with_capacity(names.len());
        let mut missing: Vec<(usize, usize)> = Vec::new();
        for name in names {
            let c = self.column_index(name)?;
            let column: Arc<str> = Arc::from(*name);
            let key = (self.path.clone(), Part::Column(column.clone()));
            if let Some(whole) = self.columns.cache.get(&key) {
                sources.push(Ok(whole));
                continue;
            }
            let table = self.page_table(c, &column, &directory)?;
            for &o in offsets {
                let p = directory.columns[c].locate(o).0;
                if table.get(p).is_none() && !missing.contains(&(c, p)) {
                    missing.push((c, p));
                }
            }
            sources.push(Err(table));
        }
        if !missing.is_empty() {
            let arrays = self.read_pages(&directory, &missing)?;
            self.columns
                .loads
                .fetch_add(missing.len() as u64, std::sync::atomic::Ordering::Relaxed);
            for (&(c, p), array) in missing.iter().zip(&arrays) {
                let data = self.page_data(c, array)?;
                // The table this search holds (the cache may have let it go).
                let table = names
                    .iter()
                    .zip(&sources)
                    .find_map(|(name, source)| match source {
                        Err(t) if self.schema.columns[c].name == *name => Some(t.clone()),
                        _ => None,
                    })
                    .ok_or_else(|| Error::Internal("page table not held".into()))?;
                table.fill(p, data);
                // Inserted again so that the cache weighs its new pages.
                let column: Arc<str> = Arc::from(self.schema.columns[c].name.as_str());
                self.columns.cache.insert(
                    (self.path.clone(), Part::PageTable(column)),
                    ColumnData::PageTable(table),
                );
            }
            self.columns.cache.run_pending_tasks();
        }
        let mut out = Vec::with_capacity(names.len());
        for (name, source) in names.iter().zip(&sources) {
            let c = self.column_index(name)?;
            let rows = offsets
                .iter()
                .map(|&o| match source {
                    Ok(whole) => Ok((whole.clone(), o)),
                    Err(table) => {
                        let (p, at) = directory.columns[c].locate(o);
                        table
                            .get(p)
                            .map(|d| (d, at))
                            .ok_or_else(|| Error::Internal("page not loaded".into()))
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            out.push(rows);
        }
        Ok(out)
    }

    /// The page table of column `c` (named `column`), from the cache or new.
    fn page_table(
        &self,
        c: usize,
        column: &Arc<str>,
        directory: &PageDirectory,
    ) -> Result<Arc<PageTable>> {
        let key = (self.path.clone(), Part::PageTable(column.clone()));
        let pages = directory.columns[c].pages.len();
        match self.columns.cache.get_with(key, || {
            ColumnData::PageTable(Arc::new(PageTable::new(pages)))
        }) {
            ColumnData::PageTable(t) => Ok(t),
            _ => Err(Error::Internal(
                "page table cache entry of wrong kind".into(),
            )),
        }
    }
}

/// The pages of one column of a paged file read so far: one slot per
/// page, each filled once. One cache entry per column, so a search finds
/// its hits' pages with one cache lookup, not one per page.
#[derive(Debug)]
pub struct PageTable {
    pages: Vec<std::sync::OnceLock<ColumnData>>,
}

impl PageTable {
    fn new(pages: usize) -> PageTable {
        PageTable {
            pages: (0..pages).map(|_| std::sync::OnceLock::new()).collect(),
        }
    }

    /// Page `p`, if read.
    pub fn get(&self, p: usize) -> Option<ColumnData> {
        self.pages.get(p).and_then(|slot| slot.get().cloned())
    }

    /// Fills page `p` (a page filled already keeps its data: the same).
    fn fill(&self, p: usize, data: ColumnData) {
        if let Some(slot) = self.pages.get(p) {
            let _ = slot.set(data);
        }
    }

    /// Bytes held: the slots and the pages read.
    pub fn size_bytes(&self) -> usize {
        64 + self.pages.len() * std::mem::size_of::<std::sync::OnceLock<ColumnData>>()
            + self
                .pages
                .iter()
                .filter_map(|s| s.get())
                .map(ColumnData::size_bytes)
                .sum::<usize>()
    }
}

fn vector_rows_of<'a>(
    view: &FragmentView,
    name: &str,
    dim: usize,
    array: &'a ArrayRef,
) -> Result<&'a [f32]> {
    super::vector_rows(&view.path, name, dim, array)
}
