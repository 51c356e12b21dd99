//! Sync jobs (SPEC.md §8): what the API asks of them ([`jobs`]), the
//! workers that run them ([`runner`]), and the schedules that start them
//! ([`schedules`]).

pub mod jobs;
pub mod runner;
pub mod schedules;
