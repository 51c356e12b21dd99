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

pub mod auth;
pub mod clock;
pub mod error;
pub mod http;
pub mod migrate;
pub mod server;
pub mod service;
pub mod state;
pub mod store;

pub use server::{serve, Config, ServeError};
