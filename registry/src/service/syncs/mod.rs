//! Sync jobs (SPEC.md §8): what the API asks of them ([`jobs`]) and the
//! workers that run them ([`runner`]).

pub mod jobs;
pub mod runner;
