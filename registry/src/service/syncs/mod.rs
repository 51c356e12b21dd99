//! Sync jobs: run, copy, publish.

pub mod runner;
