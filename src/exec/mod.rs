//! Plain synchronous search execution: scans, heaps, materialisation.
//! Nothing here knows about actors or HTTP; tests call it directly.

pub mod exact;
pub mod materialise;
