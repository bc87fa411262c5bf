//! What a search asks for ([`Query`], [`BatchQuery`]), how it is checked
//! ([`ValidatedBatch`]), filters, top-k heaps and the results returned.

pub(crate) mod filter;
pub(crate) mod request;
pub(crate) mod results;
pub(crate) mod topk;
pub(crate) mod validated;

pub(crate) use filter::Filter;
pub use request::{
    BatchQuery, FilterMode, Nprobes, PerQuery, PerQueryParams, Query, SearchMode, SharedParams,
};
pub use results::{merge_split_hits, BatchInfo, Hit, ScalarValue, SearchResponse, SearchResults};
pub(crate) use topk::{Candidate, TopK};
pub(crate) use validated::ValidatedBatch;
