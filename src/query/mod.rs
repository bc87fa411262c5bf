//! What a search asks for ([`Query`], [`BatchQuery`]), how it is checked
//! ([`ValidatedBatch`]), filters, top-k heaps and the results returned.

pub mod filter;
pub mod request;
pub mod results;
pub mod topk;

pub use filter::Filter;
pub use request::{
    BatchQuery, FilterMode, Nprobes, PerQuery, Query, SearchMode, SearchOptions, SearchParams,
    ValidatedBatch,
};
pub use results::{Hit, ScalarValue, SearchResults};
pub use topk::{Candidate, TopK};
