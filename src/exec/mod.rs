//! Plain synchronous search execution: scans, heaps, materialisation.
//! Nothing here knows about actors or HTTP; tests call it directly.

pub mod ann;
pub mod exact;
pub mod materialise;
pub mod plan;
pub mod profile;
pub mod shared_scan;
pub mod workers;

pub use profile::Profile;
