//! On-disk datasets: versioned manifests, Arrow fragments, deletion bitmaps
//! and ingest from common vector file formats.

pub(crate) mod checksum;
pub(crate) mod conform;
pub(crate) mod deletions;
pub(crate) mod fragment;
pub(crate) mod index_meta;
pub mod input;
pub(crate) mod manifest;
pub(crate) mod schema;

pub use fragment::{ColumnCache, FragmentView};
pub use manifest::{FragmentMeta, Manifest};
pub use schema::{Column, ColumnType, Schema, ID_COLUMN};
