//! Registry metadata: repositories, which blobs each repository may see,
//! manifests, tags, the referrers index, upload sessions, volumes, sync
//! jobs, their schedules and secrets, API keys, push claims and garbage collection's
//! sweeps. Every change is one transaction, so a crash leaves either all
//! of it or none of it.
//!
//! [`MetaStore`] (`db.rs`) is one type whose `impl` blocks are gathered
//! here by concept, one file each: `oci` (the `/v2` rows), `uploads`,
//! `volumes`, `claims`, `keys`, `syncs`, `schedules` and `secrets`, `gc` and `sweeps`,
//! and `copy` (`serve migrate`). `schema` declares every table and the
//! key encoding; `engine` is what the tables are kept in (redb or
//! PostgreSQL). Nothing outside this folder opens a table.

pub mod claims;
pub mod copy;
pub mod db;
pub mod engine;
pub mod error;
pub mod gc;
pub mod keys;
pub mod oci;
pub mod schedules;
pub mod schema;
pub mod secrets;
pub mod sweeps;
pub mod syncs;
pub mod uploads;
pub mod volumes;

pub use db::MetaStore;
pub use error::{MetaError, Result};
pub use oci::{ManifestRecord, References};
pub(crate) use schema::key;
