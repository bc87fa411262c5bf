//! The `hnsw` index kind: a graph over a segment's rows (`graph`), the
//! segment that holds it with the rows' ids and vectors (`segment`), and
//! the 8-bit codes a walk reads (`codes`).

pub(crate) mod codes;
pub(crate) mod graph;
pub(crate) mod segment;
