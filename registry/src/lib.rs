//! sealvol's registry: an OCI Distribution v1.1 server, the embedded
//! default that `sealvol serve` runs. Blobs are content-addressed and
//! shared by all repositories, behind the [`store::BlobStore`] trait: files
//! in the data folder ([`store::fs::FsBlobStore`], the default) or an
//! S3-compatible bucket ([`store::object::ObjectBlobStore`]); metadata is
//! in redb ([`meta::MetaStore`]). It speaks the distribution spec
//! to any OCI client, and knows volumes: each repository's versions, head,
//! tags with expiry, deletes restorable for a retention window
//! ([`volumes`], with what deduplication saves in [`stats`], served as
//! JSON by [`volume_api`]), push claims
//! ([`claims`]), online garbage collection ([`gc`]) and durable sync jobs
//! that copy a Hugging Face repository or a bucket into a new version
//! ([`sync_jobs`], run by [`sync_runner`] through `sealvol-sync`, served by
//! [`sync_api`]). Every request passes the auth layers first ([`auth`]:
//! htpasswd users, API keys ([`keys`]) and the registry's own token server
//! ([`token`]); [`access`] says what a route needs, [`authz`] whether the
//! caller has it). The state every handler and job shares is [`app::App`];
//! manifests are stored through [`manifests`], by the `/v2` handlers
//! ([`api`]) and the sync runner alike. It is not a client or a cache.
//!
//! ```no_run
//! # async fn run() -> Result<(), sealvol_registry::ServeError> {
//! let config = sealvol_registry::Config::default(); // 127.0.0.1:5000, ./sealvol-data
//! sealvol_registry::serve(config, |addr| println!("listening on {addr}")).await
//! # }
//! ```

pub mod access;
pub mod api;
pub mod app;
pub mod auth;
pub mod authz;
pub mod claims;
pub mod clock;
pub mod error;
pub mod gc;
pub mod keys;
pub mod limits;
pub mod manifests;
pub mod meta;
pub mod migrate;
pub mod pull_through;
mod query;
pub mod secrets;
pub mod server;
pub mod stats;
pub mod store;
pub mod sweeps;
pub mod sync_api;
pub mod sync_jobs;
pub mod sync_runner;
pub mod token;
pub mod trees;
pub mod ui;
pub mod uploads;
pub mod volume_api;
pub mod volumes;

pub use server::{serve, Config, ServeError};
