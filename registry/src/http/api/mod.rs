//! `/api/v1`: volumes, syncs, admin.

pub mod syncs;
pub mod volumes;
