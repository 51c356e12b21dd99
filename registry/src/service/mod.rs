//! What a request or a job does.

pub mod blobs;
pub mod claims;
pub mod files;
pub mod gc;
pub mod keys;
pub mod links;
pub mod manifests;
pub mod pull_through;
pub mod syncs;
pub mod trees;
pub mod uploads;
pub mod volumes;
