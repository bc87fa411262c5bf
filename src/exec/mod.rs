//! Plain synchronous search execution: scans, heaps, materialisation.
//! Nothing here knows about actors or HTTP; tests call it directly.

pub mod ann;
pub mod exact;
pub mod graph;
pub mod materialise;
pub mod plan;
pub mod pool;
pub mod prefilter;
pub mod profile;
pub mod shared_scan;

pub use crate::cancel::CancelToken;
pub use pool::ScanPool;
pub use profile::Profile;
