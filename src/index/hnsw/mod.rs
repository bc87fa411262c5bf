//! The `hnsw` index kind: a graph over a segment's rows (`graph`) and
//! the segment that holds it with the rows' ids and vectors (`segment`).

pub(crate) mod graph;
pub(crate) mod segment;
