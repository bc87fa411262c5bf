//! On-disk datasets: versioned manifests, Arrow fragments, deletion bitmaps
//! and ingest from common vector file formats.

pub mod conform;
pub mod deletions;
pub mod fragment;
pub mod index_meta;
pub mod ingest;
pub mod manifest;
pub mod schema;

pub use fragment::FragmentView;
pub use schema::{Column, ColumnType, Schema, ID_COLUMN};
