//! What one process holds in memory; lost on restart.

pub mod app;
pub mod syncs;
pub mod trees;
pub mod uploads;
pub mod upstream;
