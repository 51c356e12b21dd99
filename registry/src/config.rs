//! `registry.toml`: [`Config`] with its `[http]` and `[tls]` sections
//! (`[storage]` and `[metadata]` are `store`'s, `[auth]` is `auth`'s),
//! its parsing, and the exposure checks that refuse a configuration
//! which would open the registry to anyone off loopback. Every field may
//! be overridden on the command line (`sealvol serve`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::auth::policy;
use crate::auth::{Auth, AuthConfig, AuthError};
use crate::state::app::Lifetimes;
use crate::store::meta::MetaStore;
use crate::store::{MetadataConfig, StorageConfig};

/// `registry.toml`; every field may be overridden on the command line.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address to listen on; loopback unless set otherwise.
    pub addr: SocketAddr,
    /// Folder holding the metadata database and keys, and with the default
    /// `[storage]`, blobs and uploads.
    pub root: PathBuf,
    /// Where blobs and upload data live: the data folder (default), an
    /// S3-compatible bucket or an Azure Blob Storage container.
    pub storage: StorageConfig,
    /// Where metadata lives: redb in the data folder (default) or a
    /// PostgreSQL database replicas share.
    pub metadata: MetadataConfig,
    /// Longest a request may take, in seconds (large blobs stream for long).
    pub request_timeout_seconds: u64,
    /// How long a deleted version stays restorable (default 7 days).
    pub retention_seconds: u64,
    /// Unreferenced blobs and manifests younger than this survive garbage
    /// collection: a push uploads chunks before its manifests exist.
    pub gc_grace_seconds: u64,
    /// How often the server collects garbage on its own; 0 never.
    pub gc_interval_seconds: u64,
    /// How long a push claim lasts unless its holder renews it.
    pub claim_ttl_seconds: u64,
    /// An upload session idle this long is abandoned: its data file and
    /// row go, and garbage collection stops sparing its repository.
    pub upload_ttl_seconds: u64,
    /// Let `SEALVOL_TEST_CLOCK_FILE` shift the registry's clock (for
    /// end-to-end tests that move time). Off, the variable is ignored, so
    /// a stray environment cannot make a production registry expire
    /// tags, claims or uploads early.
    pub test_clock: bool,
    /// Sync jobs run at once (SPEC.md §8.2).
    pub sync_workers: usize,
    /// How long a replica's hold on a running sync job lasts unless it
    /// renews it: a replica that dies leaves its jobs to the others after
    /// this.
    pub sync_lease_seconds: u64,
    /// The shortest interval a sync schedule may have (SPEC.md §8.6).
    pub sync_schedule_min_seconds: u64,
    /// Folders `dir://` sync sources may read; empty: none.
    pub sync_dir_roots: Vec<PathBuf>,
    /// Endpoints (`http(s)://host[:port]`) a source's `?endpoint=` may
    /// name, and whose hosts a sync may reach at any address, loopback
    /// included (SPEC.md §8.4).
    pub sync_endpoints: Vec<String>,
    /// The key that seals sync secrets at rest; default `secrets.key` in
    /// the data folder, made at first start. Replicas share one.
    pub secrets_key_file: Option<PathBuf>,
    /// Authentication and authorization (SPEC.md §7.5); without it the
    /// registry is open to anyone who reaches it, so only on loopback.
    pub auth: Option<AuthConfig>,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsConfig>,
    /// Serve plain HTTP off loopback (behind a TLS-terminating proxy).
    pub allow_plain_http: bool,
    /// Without `[auth]` off loopback, let anyone pull, push and delete.
    pub allow_anonymous_writes: bool,
    /// Run as a pull-through cache of this registry
    /// (`http(s)://host[:port]`): serve what it holds, keep what was
    /// fetched, refuse pushes (see `pull_through`).
    pub upstream: Option<String>,
    /// A file holding `USER:PASSWORD` for the upstream.
    pub upstream_credentials_file: Option<PathBuf>,
    /// How long a tag resolved on the upstream is answered from the cache.
    pub tag_ttl_seconds: u64,
    /// Bytes of cached blobs a pull-through cache keeps at most, least
    /// recently used going first; unbounded when unset.
    pub cache_size: Option<u64>,
    /// How connections are held: timeouts and a cap on how many are open.
    pub http: HttpConfig,
    /// The S3 gateway's listener (SPEC.md §10); none without `[s3]`.
    pub s3: Option<S3Config>,
}

/// `registry.toml` `[s3]`: where the read-only S3 gateway listens. It has
/// a listener of its own, not a path prefix on `addr`, because a SigV4
/// signature covers the request path and clients address buckets from
/// the endpoint's root: every S3 client accepts `http(s)://host:port` as
/// an endpoint, few keep a path prefix in what they sign.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    pub addr: SocketAddr,
}

/// `registry.toml` `[http]`: how long a slow or silent client may hold a
/// connection, and how many may be open at once (distribution's
/// `http.timeout`), so that a few hundred clients that open connections
/// and send nothing cannot hold the registry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Seconds a client has to send a request's headers, on a new
    /// connection (its TLS handshake included) or on a kept-alive one
    /// after the previous answer; then the connection is closed.
    pub read_header_timeout_seconds: u64,
    /// Seconds a request body may go without a byte arriving; then the
    /// request fails (408) and its connection is closed.
    pub idle_timeout_seconds: u64,
    /// Connections open at once; further clients wait in the listen
    /// queue until one closes. At most half the process's open-file
    /// limit, which the store needs too.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            read_header_timeout_seconds: 10,
            idle_timeout_seconds: 60,
            max_connections: 4096,
        }
    }
}

/// `registry.toml` `[tls]`: PEM files.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 5000)),
            root: PathBuf::from("sealvol-data"),
            storage: StorageConfig::default(),
            metadata: MetadataConfig::default(),
            request_timeout_seconds: 3600,
            retention_seconds: Lifetimes::default().retention_seconds,
            gc_grace_seconds: Lifetimes::default().gc_grace_seconds,
            gc_interval_seconds: 3600,
            claim_ttl_seconds: Lifetimes::default().claim_ttl_seconds,
            upload_ttl_seconds: Lifetimes::default().upload_ttl_seconds,
            test_clock: false,
            sync_workers: 2,
            sync_lease_seconds: crate::state::syncs::DEFAULT_LEASE_SECONDS,
            sync_schedule_min_seconds: sealvol_spec::api::ScheduleRequest::MIN_EVERY,
            sync_dir_roots: Vec::new(),
            sync_endpoints: Vec::new(),
            secrets_key_file: None,
            auth: None,
            tls: None,
            allow_plain_http: false,
            allow_anonymous_writes: false,
            upstream: None,
            upstream_credentials_file: None,
            tag_ttl_seconds: 60,
            cache_size: None,
            http: HttpConfig::default(),
            s3: None,
        }
    }
}

/// Why a configuration is not served; [`crate::server::ServeError`]
/// carries each as it is, with the same message.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {message}")]
    Read { path: PathBuf, message: String },
    /// A configuration that would expose the registry; the message says
    /// what to set.
    #[error("{0}")]
    Unsafe(String),
    #[error(transparent)]
    Auth(#[from] AuthError),
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let err = |message: String| ConfigError::Read {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        toml::from_str(&text).map_err(|e| err(e.to_string()))
    }
}

impl Config {
    /// Refuses what would expose the registry off loopback, and says what
    /// anonymous callers may do where there is no `[auth]`.
    pub fn exposure(&self) -> Result<policy::Policy, ConfigError> {
        // The S3 gateway's listener is held to the same rules: the first
        // address off loopback is the one the refusals name.
        let exposed = std::iter::once(self.addr)
            .chain(self.s3.as_ref().map(|s| s.addr))
            .find(|a| !a.ip().is_loopback());
        let addr = exposed.unwrap_or(self.addr);
        let loopback = exposed.is_none();
        if !loopback && self.tls.is_none() && !self.allow_plain_http {
            return Err(ConfigError::Unsafe(format!(
                "refusing plain HTTP on {addr}: set [tls] certificate and key, or pass --allow-plain-http behind a TLS-terminating proxy"
            )));
        }
        match &self.auth {
            Some(auth) => {
                if !loopback && auth.public_url.is_none() {
                    return Err(ConfigError::Unsafe(format!(
                        "[auth] public_url is required on {addr} (the address clients use, https://registry.example.com)"
                    )));
                }
                Ok(policy::Policy::default())
            }
            None if loopback => Ok(policy::Policy::loopback()),
            None if self.allow_anonymous_writes => Ok(policy::Policy::anonymous_writes()),
            None => Err(ConfigError::Unsafe(format!(
                "refusing to serve {addr} without authentication: set [auth] htpasswd in registry.toml, or pass --allow-anonymous-writes to let anyone pull, push and delete"
            ))),
        }
    }

    /// The authentication state for a registry bound to `addr`, its API
    /// keys in `meta`.
    pub fn auth(&self, addr: SocketAddr, meta: Arc<MetaStore>) -> Result<Arc<Auth>, ConfigError> {
        let open = self.exposure()?;
        if self.auth.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(
                "no [auth] on {addr}: anyone who reaches it may pull, push and delete (--allow-anonymous-writes)"
            );
        }
        Ok(Arc::new(Auth::from_config(
            self.auth.as_ref(),
            open,
            addr,
            self.tls.is_some(),
            &self.root,
            meta,
        )?))
    }

    pub fn lifetimes(&self) -> Lifetimes {
        Lifetimes {
            retention_seconds: self.retention_seconds,
            gc_grace_seconds: self.gc_grace_seconds,
            claim_ttl_seconds: self.claim_ttl_seconds.max(1),
            upload_ttl_seconds: self.upload_ttl_seconds.max(1),
        }
    }
}
