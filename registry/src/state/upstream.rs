//! The upstream registry of a pull-through cache and what this process
//! knows of it: its client, tags resolved and when, blob fetches under
//! way, when each blob was last served, and the pins eviction leaves.
//! What the cache does with it is `service::pull_through`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::{BoxFuture, Shared};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sealvol_spec::Sha256Digest;

use crate::error::{Code, RegistryError, Result};

/// `registry.toml` fields of the mode.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// `http(s)://host[:port]` or `host[:port]` (loopback is plain HTTP).
    pub url: String,
    /// A file holding `USER:PASSWORD` for the upstream.
    pub credentials_file: Option<std::path::PathBuf>,
    pub tag_ttl_seconds: u64,
    /// Bytes of blobs kept at most; `None` unbounded.
    pub cache_size: Option<u64>,
}

/// Counters a test or `/metrics` reads.
#[derive(Debug, Default)]
pub struct UpstreamStats {
    pub blobs_fetched: AtomicU64,
    pub bytes_fetched: AtomicU64,
    pub manifests_fetched: AtomicU64,
}

pub(crate) type Fetch = Shared<BoxFuture<'static, Result<()>>>;

/// The upstream registry and what this cache knows of it.
pub struct Upstream {
    /// What messages call it.
    pub url: String,
    pub(crate) registry: String,
    pub(crate) client: Client,
    pub(crate) auth: RegistryAuth,
    pub(crate) tag_ttl: u64,
    pub(crate) cache_size: Option<u64>,
    /// `(repo, tag)` -> when it was last resolved on the upstream.
    pub(crate) resolved: Mutex<HashMap<(String, String), u64>>,
    /// Blob fetches under way.
    pub(crate) fetching: Mutex<HashMap<Sha256Digest, Fetch>>,
    /// Blob -> when it was last served (this process); older blobs count
    /// from when they were stored.
    pub(crate) used: Mutex<HashMap<Sha256Digest, u64>>,
    /// One eviction at a time.
    pub(crate) evicting: tokio::sync::Mutex<()>,
    /// Blobs and manifests a request is about to serve, with how many
    /// requests: eviction leaves them.
    pub(crate) pinned: Mutex<HashMap<Sha256Digest, usize>>,
    /// The last eviction left the cache over `cache_size` (pins).
    pub(crate) over: std::sync::atomic::AtomicBool,
    pub stats: UpstreamStats,
}

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> std::result::Result<Upstream, String> {
        let url = config.url.trim_end_matches('/');
        let (scheme, registry) = match url.split_once("://") {
            Some((s @ ("http" | "https"), rest)) => (Some(s), rest),
            Some((s, _)) => return Err(format!("upstream {url}: scheme {s} is not http or https")),
            None => (None, url),
        };
        if registry.is_empty() || registry.contains('/') {
            return Err(format!(
                "upstream {url}: give the registry as http(s)://host[:port]"
            ));
        }
        let plain = match scheme {
            Some(s) => s == "http",
            None => sealvol_spec::reference::is_loopback_host(registry),
        };
        let auth = match &config.credentials_file {
            None => RegistryAuth::Anonymous,
            Some(file) => read_credentials(file)?,
        };
        let client = Client::new(ClientConfig {
            protocol: if plain {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("sealvol/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        });
        Ok(Upstream {
            url: url.to_string(),
            registry: registry.to_string(),
            client,
            auth,
            tag_ttl: config.tag_ttl_seconds,
            cache_size: config.cache_size,
            resolved: Mutex::default(),
            fetching: Mutex::default(),
            used: Mutex::default(),
            evicting: tokio::sync::Mutex::new(()),
            pinned: Mutex::default(),
            over: Default::default(),
            stats: UpstreamStats::default(),
        })
    }

    pub(crate) fn reference(&self, repo: &str, reference: &str) -> Reference {
        if reference.contains(':') {
            Reference::with_digest(self.registry.clone(), repo.into(), reference.into())
        } else {
            Reference::with_tag(self.registry.clone(), repo.into(), reference.into())
        }
    }

    /// What an upstream failure means for the client: its 404 is ours,
    /// anything else is a bad gateway.
    pub(crate) fn failed(
        &self,
        what: &str,
        e: OciDistributionError,
        unknown: Code,
    ) -> RegistryError {
        let not_found = match &e {
            OciDistributionError::RegistryError { envelope, .. } => {
                envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::NotFound
                    )
                })
            }
            OciDistributionError::ServerError { code, .. } => *code == 404,
            OciDistributionError::RequestError(e) => e.status().map(|s| s.as_u16()) == Some(404),
            OciDistributionError::ImageManifestNotFoundError(_) => true,
            _ => false,
        };
        if not_found {
            return RegistryError::new(
                unknown,
                format!("{what} is not on the upstream {}", self.url),
            );
        }
        RegistryError::Upstream(format!("upstream {}: {what}: {e}", self.url))
    }

    pub(crate) fn pin(&self, digest: Sha256Digest) -> Pin<'_> {
        *self
            .pinned
            .lock()
            .expect("pinned lock")
            .entry(digest)
            .or_default() += 1;
        Pin { up: self, digest }
    }

    /// Records that `digest` was served now, for the LRU order.
    pub(crate) fn used(&self, digest: &Sha256Digest, now: u64) {
        self.used.lock().expect("used lock").insert(*digest, now);
    }
}

/// A blob or manifest eviction leaves alone while this lives.
pub(crate) struct Pin<'a> {
    pub(crate) up: &'a Upstream,
    pub(crate) digest: Sha256Digest,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        let mut pinned = self.up.pinned.lock().expect("pinned lock");
        if let Some(n) = pinned.get_mut(&self.digest) {
            *n -= 1;
            if *n == 0 {
                pinned.remove(&self.digest);
            }
        }
    }
}

/// `USER:PASSWORD` from a file; its contents never appear in an error.
fn read_credentials(file: &Path) -> std::result::Result<RegistryAuth, String> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        format!(
            "cannot read upstream_credentials_file {}: {e}",
            file.display()
        )
    })?;
    match text.trim_end_matches(['\r', '\n']).split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.contains('\n') => {
            Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
        }
        _ => Err(format!(
            "upstream_credentials_file {} must hold USER:PASSWORD on one line",
            file.display()
        )),
    }
}
