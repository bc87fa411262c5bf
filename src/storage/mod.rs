//! Datasets' files: versioned manifests, Arrow fragments, deletion bitmaps,
//! ingest from common vector file formats, and where the files live (a
//! local directory or object storage).

pub(crate) mod checksum;
pub(crate) mod conform;
pub(crate) mod deletions;
pub(crate) mod fragment;
pub(crate) mod index_meta;
pub mod input;
pub mod io_meter;
pub(crate) mod manifest;
pub(crate) mod paged;
pub(crate) mod remote;
pub(crate) mod root;
pub(crate) mod schema;

pub use fragment::{ColumnCache, FragmentView};
pub use io_meter::StorageIo;
pub use manifest::{FragmentMeta, Manifest};
pub use remote::{DiskCache, Remote};
pub use root::{DatasetRoot, RangedFile};
pub use schema::{Column, ColumnType, Schema, ID_COLUMN};
