//! sealvol's registry: an OCI Distribution v1.1 server that knows volumes,
//! the embedded default that `sealvol serve` runs. It speaks the
//! distribution spec to any OCI client (`/v2`), serves the volume API
//! (`/api/v1`: versions, tags, deletes restorable for a retention window,
//! push claims, stats, API keys, sync jobs, garbage collection), a web
//! view (`/ui`) and the files of sealed versions over the Hugging Face Hub
//! API (`/hf`), and keeps blobs once for every repository. It is not a
//! client (that is `sealvol-client`) and not a cache of chunks on a node
//! (that is the snapshotter); its pull-through mode caches another
//! registry.
//!
//! # Floors
//!
//! The crate is four floors; a file imports only from the floors below
//! its own, and no two files import each other (`tests/floors.rs` holds
//! both):
//!
//! ```text
//!  server, migrate      the assembly: open the stores, build App, serve
//!  ───────────────────────────────────────────────────────────────────
//!  http/     the wire: parse once, call a service, answer
//!     │  ╲
//!     ▼   ╲
//!  service/  ╲      what a request or a job does, over &App
//!     │  ╲    ▼
//!     │   ▼  auth/  who is calling and what they may do; no HTTP
//!     ▼        │
//!  state/      │    what one process holds in memory, lost on restart
//!     │        │
//!     ▼        ▼
//!  store/           what survives a restart; only this floor opens a table
//!  ───────────────────────────────────────────────────────────────────
//!  error, clock     under all of them
//! ```
//!
//! # Where each concept lives
//!
//! A concept keeps its name on every floor:
//!
//! | concept | http | service | state | store |
//! |---|---|---|---|---|
//! | manifests, tags, referrers | `http::oci::manifests` | `service::manifests` | | `store::meta::oci` |
//! | blobs and their links | `http::oci::blobs` | `service::blobs`, `service::links` | | `store::blobs`, `store::meta::oci`, `store::meta::sweeps` |
//! | uploads | `http::oci::uploads` | `service::uploads` | `state::uploads` | `store::meta::uploads` |
//! | volumes, versions | `http::api::volumes`, `http::ui` | `service::volumes`, `service::trees` | `state::trees` | `store::meta::volumes` |
//! | claims | `http::api::volumes` | `service::claims` | | `store::meta::claims` |
//! | syncs, secrets | `http::api::syncs`, `http::api::admin` | `service::syncs` (jobs, runner) | `state::syncs` | `store::meta::syncs`, `store::meta::secrets` |
//! | keys | `http::api::admin` | `service::keys` | | `store::meta::keys` |
//! | garbage collection | `http::api::admin` | `service::gc` | | `store::meta::gc` |
//! | pull-through cache | `http::oci` | `service::pull_through` | `state::upstream` | |
//! | files of versions (gateways) | `http::hf` | `service::files` | `state::trees` | `store::blobs` |
//! | auth | `http::layers`, `http::token`, `http::access` | | | `store::meta::keys` |
//!
//! Every path is parsed once, in [`http::routes`]; [`http::access`] says
//! what a route needs and [`auth::policy`] whether the caller has it, in
//! the layers of [`http::layers`] before any handler runs. Every table is
//! declared once, in [`store::meta::schema`]. The state every handler and
//! job shares is [`state::app::App`].
//!
//! ```no_run
//! # async fn run() -> Result<(), sealvol_registry::ServeError> {
//! let config = sealvol_registry::Config::default(); // 127.0.0.1:5000, ./sealvol-data
//! sealvol_registry::serve(config, |addr| println!("listening on {addr}")).await
//! # }
//! ```

pub mod auth;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod migrate;
pub mod server;
pub mod service;
pub mod state;
pub mod store;

pub use server::{serve, Config, ServeError};
