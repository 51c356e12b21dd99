//! What one process holds in memory; lost on restart.

pub mod app;
