//! The upstream registry of a pull-through cache and what this process
//! knows of it: its client and how it lets this cache in, tags resolved
//! and when, blob fetches under way, when each blob was last served, and
//! the pins eviction leaves; and the referrers it lists (its referrers API,
//! or its referrers tag schema), read in bounded pages. What the cache
//! does with it is `service::pull_through`.
//!
//! # One request per blob and manifest
//!
//! A fetch costs the upstream one request. Authenticating costs one
//! handshake, `oci-client`'s `Client::auth`: a `GET /v2/`, and where the
//! upstream challenges with `Bearer`, a token fetch (per repository, as
//! tokens are scoped). It runs once, one at a time, and again only when
//! a token expires (`oci-client` does that itself) or a fetch is refused
//! with 401 (then the fetch is sent once more).
//!
//! `oci-client` alone would probe before every fetch of an open
//! upstream: it caches bearer tokens and Basic answers, but not that a
//! registry asked for nothing, so with credentials stored for it and no
//! token cached it sends `GET /v2/` again each time (two requests per
//! blob). So where the handshake yields a token, `oci-client` fetches with
//! it; where it yields none (the upstream is open, or takes Basic
//! credentials), fetches go over plain HTTP, with the credentials when
//! there are any, as the client and sync crates fetch from open
//! registries.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::{BoxFuture, Shared};
use futures_util::stream::BoxStream;
use futures_util::{StreamExt as _, TryStreamExt as _};
use oci_client::client::{ClientConfig, ClientProtocol, TagResponse};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sealvol_spec::oci::{
    is_artifact, next_link, referrers_list, referrers_tag, OciDescriptor, MAX_MANIFEST_BYTES,
    REFERRER_PAGES,
};
use sealvol_spec::Sha256Digest;

use crate::error::{Code, RegistryError, Result};

/// Media types asked of the upstream for a manifest.
pub(crate) const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const USER_AGENT: &str = concat!("sealvol/", env!("CARGO_PKG_VERSION"));

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
    /// Handshakes run: the first, and one after each refused fetch.
    pub handshakes: AtomicU64,
}

/// How the upstream lets this cache in, as the handshake found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// No token: the upstream is open or takes Basic credentials. Fetches
    /// go over plain HTTP, with the credentials when there are any.
    Direct,
    /// A bearer token, which `oci-client` holds per repository and fetches
    /// with until it expires (then it runs the handshake again itself).
    Token,
}

/// What the handshake found, one handshake at a time.
#[derive(Debug, Default)]
struct Handshake {
    access: Option<Access>,
    /// Repositories `oci-client` holds a token for, with the token (for
    /// the requests `oci-client` has no call for: the referrers API).
    tokens: HashMap<String, String>,
    /// Bumped by each handshake after a 401, so that fetches refused
    /// together run one.
    generation: u64,
}

/// Why a fetch from the upstream failed.
#[derive(Debug)]
pub(crate) enum Failure {
    Oci(OciDistributionError),
    /// A plain fetch that did not get an answer.
    Http(reqwest::Error),
    /// A plain fetch answered with this status.
    Status(u16),
    /// An answer this cache does not take (too large, not what was asked).
    Bad(String),
}

impl From<OciDistributionError> for Failure {
    fn from(e: OciDistributionError) -> Failure {
        Failure::Oci(e)
    }
}

impl Failure {
    /// The upstream refused the credentials or token the fetch carried.
    fn unauthorized(&self) -> bool {
        match self {
            Failure::Bad(_) => false,
            Failure::Status(s) => *s == 401,
            Failure::Http(e) => e.status().map(|s| s.as_u16()) == Some(401),
            Failure::Oci(e) => match e {
                OciDistributionError::UnauthorizedError { .. } => true,
                OciDistributionError::ServerError { code, .. } => *code == 401,
                OciDistributionError::RequestError(e) => {
                    e.status().map(|s| s.as_u16()) == Some(401)
                }
                OciDistributionError::RegistryError { envelope, .. } => envelope
                    .errors
                    .iter()
                    .any(|e| e.code == OciErrorCode::Unauthorized),
                _ => false,
            },
        }
    }

    /// The upstream has no such thing (or no such endpoint).
    fn not_found(&self) -> bool {
        match self {
            Failure::Status(s) => *s == 404,
            Failure::Http(e) => e.status().map(|s| s.as_u16()) == Some(404),
            Failure::Oci(OciDistributionError::RegistryError { envelope, .. }) => {
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
            Failure::Oci(OciDistributionError::ServerError { code, .. }) => *code == 404,
            Failure::Oci(OciDistributionError::RequestError(e)) => {
                e.status().map(|s| s.as_u16()) == Some(404)
            }
            Failure::Oci(OciDistributionError::ImageManifestNotFoundError(_)) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Oci(e) => write!(f, "{e}"),
            Failure::Http(e) => write!(f, "{e}"),
            Failure::Status(s) => write!(f, "HTTP {s}"),
            Failure::Bad(why) => write!(f, "a bad answer: {why}"),
        }
    }
}

/// A blob's bytes as the upstream sends them.
pub(crate) struct BlobBody {
    /// What its `Content-Length` announced.
    pub(crate) len: Option<u64>,
    pub(crate) stream: BoxStream<'static, std::io::Result<Bytes>>,
}

pub(crate) type Fetch = Shared<BoxFuture<'static, Result<()>>>;

/// The upstream registry and what this cache knows of it.
pub struct Upstream {
    /// What messages call it.
    pub url: String,
    pub(crate) registry: String,
    scheme: &'static str,
    client: Client,
    /// Fetches where no token is needed.
    http: reqwest::Client,
    auth: RegistryAuth,
    handshake: tokio::sync::Mutex<Handshake>,
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
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            user_agent: USER_AGENT,
            ..Default::default()
        });
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| format!("upstream {url}: cannot make an HTTP client: {e}"))?;
        Ok(Upstream {
            url: url.to_string(),
            registry: registry.to_string(),
            scheme: if plain { "http" } else { "https" },
            client,
            http,
            auth,
            handshake: tokio::sync::Mutex::default(),
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

    /// Manifest `reference` of `repo`, at most `max` bytes (more are not
    /// read; the caller sees `max + 1` and refuses it).
    pub(crate) async fn manifest(
        &self,
        repo: &str,
        reference: &str,
        max: usize,
    ) -> std::result::Result<Bytes, Failure> {
        let r = &self.reference(repo, reference);
        self.with_access(repo, |access| async move {
            match access {
                Access::Token => Ok(self
                    .client
                    .pull_manifest_raw(r, &self.auth, MANIFEST_TYPES)
                    .await?
                    .0),
                Access::Direct => {
                    let url = self.url_of(r, &format!("manifests/{reference}"));
                    let resp = self
                        .get(url)
                        .header(reqwest::header::ACCEPT, MANIFEST_TYPES.join(", "))
                        .send()
                        .await
                        .map_err(Failure::Http)?;
                    let resp = answered(resp)?;
                    let mut body = resp.bytes_stream();
                    let mut out = BytesMut::new();
                    while let Some(piece) = body.next().await {
                        out.extend_from_slice(&piece.map_err(Failure::Http)?);
                        if out.len() > max {
                            out.truncate(max + 1);
                            break;
                        }
                    }
                    Ok(out.freeze())
                }
            }
        })
        .await
    }

    /// Blob `digest` of `repo`, as a stream.
    pub(crate) async fn blob(
        &self,
        repo: &str,
        digest: &Sha256Digest,
    ) -> std::result::Result<BlobBody, Failure> {
        let d = &digest.to_string();
        let r = &self.reference(repo, d);
        self.with_access(repo, |access| async move {
            match access {
                Access::Token => {
                    let sized = self.client.pull_blob_stream(r, d.as_str()).await?;
                    Ok(BlobBody {
                        len: sized.content_length,
                        stream: sized.stream,
                    })
                }
                Access::Direct => {
                    let resp = self
                        .get(self.url_of(r, &format!("blobs/{d}")))
                        .send()
                        .await
                        .map_err(Failure::Http)?;
                    let resp = answered(resp)?;
                    Ok(BlobBody {
                        len: resp.content_length(),
                        stream: resp.bytes_stream().map_err(std::io::Error::other).boxed(),
                    })
                }
            }
        })
        .await
    }

    /// The tags of `repo` (one page, as the upstream gives it).
    pub(crate) async fn tags(&self, repo: &str) -> std::result::Result<Vec<String>, Failure> {
        let r = &self.reference(repo, "latest");
        self.with_access(repo, |access| async move {
            match access {
                Access::Token => Ok(self.client.list_tags(r, &self.auth, None, None).await?.tags),
                Access::Direct => {
                    let resp = self
                        .get(self.url_of(r, "tags/list"))
                        .send()
                        .await
                        .map_err(Failure::Http)?;
                    let list: TagResponse = answered(resp)?.json().await.map_err(Failure::Http)?;
                    Ok(list.tags)
                }
            }
        })
        .await
    }

    /// The referrers of manifest `subject` in `repo` as the upstream lists
    /// them, those of `artifactType` `artifact_type` when one is given
    /// (filtered here too: a registry may ignore the filter). At most
    /// [`REFERRER_PAGES`] pages of the referrers API, each at most the
    /// manifest limit; where the upstream has no referrers API (it answers
    /// 404), its referrers tag schema's index (`sha256-<hex>`), none when
    /// that tag is not there either.
    pub(crate) async fn referrers(
        &self,
        repo: &str,
        subject: &Sha256Digest,
        artifact_type: Option<&str>,
    ) -> std::result::Result<Vec<OciDescriptor>, Failure> {
        let r = &self.reference(repo, &subject.to_string());
        let first = self.url_of(r, &format!("referrers/{subject}"));
        let mut url = reqwest::Url::parse(&first)
            .map_err(|e| Failure::Bad(format!("{first} is not a URL: {e}")))?;
        if let Some(t) = artifact_type {
            url.query_pairs_mut().append_pair("artifactType", t);
        }
        let mut found = Vec::new();
        for page in 0..REFERRER_PAGES {
            let fetched = self
                .with_access(repo, |access| self.get_bounded(repo, access, url.clone()))
                .await;
            let (body, next) = match fetched {
                Err(e) if page == 0 && e.not_found() => {
                    found = self.referrers_by_tag(repo, subject).await?;
                    break;
                }
                fetched => fetched?,
            };
            found.extend(
                referrers_list(&body)
                    .map_err(|e| Failure::Bad(format!("the referrers of {subject}: {e}")))?,
            );
            match next {
                Some(next) => url = same_origin(&url, &next)?,
                None => break,
            }
        }
        if let Some(t) = artifact_type {
            found.retain(|d| is_artifact(d, t));
        }
        let mut seen = HashSet::new();
        found.retain(|d| seen.insert(d.digest().to_string()));
        Ok(found)
    }

    /// The entries of the referrers tag schema's index of `subject`; none
    /// when there is no such tag, or it holds no index.
    async fn referrers_by_tag(
        &self,
        repo: &str,
        subject: &Sha256Digest,
    ) -> std::result::Result<Vec<OciDescriptor>, Failure> {
        let tag = referrers_tag(subject);
        let bytes = match self.manifest(repo, &tag, MAX_MANIFEST_BYTES).await {
            Ok(b) => b,
            Err(e) if e.not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(Failure::Bad(format!(
                "the referrers index {repo}:{tag} is over {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        match referrers_list(&bytes) {
            Ok(found) => Ok(found),
            // Not an index: not the tag schema's, so no referrers.
            Err(e) => {
                tracing::debug!(upstream = %self.url, repo, tag, error = %e, "referrers tag holds no index");
                Ok(Vec::new())
            }
        }
    }

    /// A `GET` of a JSON list of at most the manifest limit, refused
    /// before it is read when it announces more and cut off when it sends
    /// more: its body and the target of its `Link: <...>; rel="next"`.
    async fn get_bounded(
        &self,
        repo: &str,
        access: Access,
        url: reqwest::Url,
    ) -> std::result::Result<(Bytes, Option<String>), Failure> {
        let max = MAX_MANIFEST_BYTES;
        let mut req = self
            .get(url.to_string())
            .header(reqwest::header::ACCEPT, MANIFEST_TYPES[0]);
        if access == Access::Token {
            let token = self.handshake.lock().await.tokens.get(repo).cloned();
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
        }
        let resp = answered(req.send().await.map_err(Failure::Http)?)?;
        let next = resp
            .headers()
            .get(reqwest::header::LINK)
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        let too_large = || Failure::Bad(format!("{url}: a list over {max} bytes"));
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_large());
        }
        let mut body = resp.bytes_stream();
        let mut out = BytesMut::new();
        while let Some(piece) = body.next().await {
            out.extend_from_slice(&piece.map_err(Failure::Http)?);
            if out.len() > max {
                return Err(too_large());
            }
        }
        Ok((out.freeze(), next))
    }

    /// Runs `fetch` with what the handshake found; a fetch refused with
    /// 401 runs the handshake again (once for fetches refused together)
    /// and is sent once more.
    async fn with_access<T, F, Fut>(&self, repo: &str, fetch: F) -> std::result::Result<T, Failure>
    where
        F: Fn(Access) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Failure>>,
    {
        let (access, generation) = self.access(repo, None).await?;
        match fetch(access).await {
            Err(e) if e.unauthorized() => {
                tracing::debug!(upstream = %self.url, repo, error = %e, "refused: authenticating again");
                let (access, _) = self.access(repo, Some(generation)).await?;
                fetch(access).await
            }
            done => done,
        }
    }

    /// How to fetch from `repo`: what the handshake found, running it
    /// first where nothing was found yet, or again when `refused` names
    /// the generation a refused fetch used (unless another fetch ran it
    /// since). One handshake at a time: fetches that start together wait
    /// for the one.
    async fn access(
        &self,
        repo: &str,
        refused: Option<u64>,
    ) -> std::result::Result<(Access, u64), Failure> {
        let mut h = self.handshake.lock().await;
        if refused == Some(h.generation) {
            h.generation += 1;
            h.access = None;
            h.tokens.clear();
        }
        match h.access {
            Some(Access::Direct) => return Ok((Access::Direct, h.generation)),
            Some(Access::Token) if h.tokens.contains_key(repo) => {
                return Ok((Access::Token, h.generation))
            }
            _ => {}
        }
        let r = self.reference(repo, "latest");
        let token = self
            .client
            .auth(&r, &self.auth, RegistryOperation::Pull)
            .await?;
        self.stats.handshakes.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("sealvol_upstream_handshakes_total").increment(1);
        let access = if let Some(token) = token {
            h.tokens.insert(repo.to_string(), token);
            Access::Token
        } else {
            Access::Direct
        };
        h.access = Some(access);
        Ok((access, h.generation))
    }

    /// `<scheme>://<registry>/v2/<repo>/<rest>`, as `oci-client` builds it.
    fn url_of(&self, r: &Reference, rest: &str) -> String {
        format!(
            "{}://{}/v2/{}/{rest}",
            self.scheme,
            r.resolve_registry(),
            r.repository()
        )
    }

    /// A plain GET, with the credentials when there are any.
    fn get(&self, url: String) -> reqwest::RequestBuilder {
        let req = self.http.get(url);
        match &self.auth {
            RegistryAuth::Basic(user, password) => req.basic_auth(user, Some(password)),
            _ => req,
        }
    }

    /// What an upstream failure means for the client: its 404 is ours,
    /// anything else is a bad gateway.
    pub(crate) fn failed(&self, what: &str, e: Failure, unknown: Code) -> RegistryError {
        if e.not_found() {
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

/// The next page `next` (a `Link` target) of list `url`, which must stay
/// on the upstream: credentials go nowhere else.
fn same_origin(url: &reqwest::Url, next: &str) -> std::result::Result<reqwest::Url, Failure> {
    let to = url
        .join(next)
        .map_err(|e| Failure::Bad(format!("Link {next:?}: {e}")))?;
    if to.origin() != url.origin() {
        return Err(Failure::Bad(format!(
            "Link {next:?} leaves the upstream {}",
            url.origin().ascii_serialization()
        )));
    }
    Ok(to)
}

/// `resp` when it is a success, else its status as the failure.
fn answered(resp: reqwest::Response) -> std::result::Result<reqwest::Response, Failure> {
    match resp.status() {
        s if s.is_success() => Ok(resp),
        s => Err(Failure::Status(s.as_u16())),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const SIG: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
    const PREFETCH: &str = "application/vnd.sealvol.prefetch.v1";

    fn entry(n: u8, artifact: &str) -> serde_json::Value {
        serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": Sha256Digest([n; 32]).to_string(),
            "size": 100 + u64::from(n),
            "artifactType": artifact,
        })
    }

    fn index(entries: &[serde_json::Value]) -> String {
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": entries,
        })
        .to_string()
    }

    /// An upstream on a loopback port: `api` has the referrers API in two
    /// pages (the second repeating an entry of the first), `old` has only
    /// the referrers tag schema, `none` neither, `big` answers a list over
    /// the limit, `away` links its next page to another host, `loop` links
    /// each page to another, without end. Answers the upstream and the
    /// requests it saw.
    async fn upstream() -> (Upstream, Arc<Mutex<Vec<String>>>) {
        use axum::http::{StatusCode, Uri};
        use axum::response::IntoResponse;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let subject = Sha256Digest([9; 32]);
        let tag = referrers_tag(&subject);
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let (log, tag) = (Arc::clone(&log), tag.clone());
            async move {
                log.lock().unwrap().push(uri.to_string());
                let path = uri.path();
                let query = uri.query().unwrap_or_default();
                let link = |to: &str| [(axum::http::header::LINK, format!("<{to}>; rel=\"next\""))];
                if path == "/v2/" {
                    return "{}".into_response();
                }
                let (repo, rest) = path
                    .strip_prefix("/v2/")
                    .and_then(|p| p.split_once('/'))
                    .unwrap_or_default();
                match (repo, rest.split('/').next().unwrap_or_default()) {
                    ("api", "referrers") if query.contains("page=2") => {
                        index(&[entry(2, PREFETCH), entry(1, SIG)]).into_response()
                    }
                    ("api", "referrers") => (
                        link(&format!("{path}?page=2")),
                        index(&[entry(1, SIG), entry(3, SIG)]),
                    )
                        .into_response(),
                    ("old", "manifests") if rest.ends_with(&tag) => {
                        index(&[entry(4, SIG), entry(5, PREFETCH)]).into_response()
                    }
                    ("big", "referrers") => "x".repeat(MAX_MANIFEST_BYTES + 1).into_response(),
                    ("away", "referrers") => (
                        link("http://elsewhere.example/v2/away/referrers/x"),
                        index(&[entry(6, SIG)]),
                    )
                        .into_response(),
                    ("loop", "referrers") => (link(path), index(&[entry(7, SIG)])).into_response(),
                    _ => StatusCode::NOT_FOUND.into_response(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let up = Upstream::new(&UpstreamConfig {
            url: format!("http://{addr}"),
            credentials_file: None,
            tag_ttl_seconds: 0,
            cache_size: None,
        })
        .unwrap();
        (up, seen)
    }

    fn digests(found: &[OciDescriptor]) -> Vec<u8> {
        found
            .iter()
            .map(|d| {
                let hex = d.digest().digest().to_string();
                u8::from_str_radix(&hex[..2], 16).unwrap()
            })
            .collect()
    }

    #[tokio::test]
    async fn referrers_follow_pages_or_the_tag_schema_filter_and_stay_bounded() {
        let (up, seen) = upstream().await;
        let subject = Sha256Digest([9; 32]);

        // Two pages, once each entry; the filter applied here too.
        let all = up.referrers("api", &subject, None).await.unwrap();
        assert_eq!(digests(&all), [1, 3, 2]);
        let sigs = up.referrers("api", &subject, Some(SIG)).await.unwrap();
        assert_eq!(digests(&sigs), [1, 3]);
        assert!(seen
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.contains("artifactType=application%2Fvnd.dev.sigstore")));

        // No referrers API: the referrers tag schema, filtered here.
        let old = up.referrers("old", &subject, Some(SIG)).await.unwrap();
        assert_eq!(digests(&old), [4]);
        // Neither: none.
        assert!(up
            .referrers("none", &subject, None)
            .await
            .unwrap()
            .is_empty());

        // Over the limit, or a page elsewhere: refused.
        let big = up.referrers("big", &subject, None).await.unwrap_err();
        assert!(big.to_string().contains("over"), "{big}");
        let away = up.referrers("away", &subject, None).await.unwrap_err();
        assert!(away.to_string().contains("leaves the upstream"), "{away}");

        // Pages without end: REFERRER_PAGES of them are read.
        let before = seen.lock().unwrap().len();
        let looped = up.referrers("loop", &subject, None).await.unwrap();
        assert_eq!(digests(&looped), [7]);
        assert_eq!(seen.lock().unwrap().len() - before, REFERRER_PAGES);
    }

    #[test]
    fn a_401_in_any_form_asks_for_the_handshake_again_and_a_404_is_unknown_here() {
        let server = |code| OciDistributionError::ServerError {
            code,
            url: "http://u/v2/r/blobs/x".into(),
            message: String::new(),
        };
        assert!(Failure::Status(401).unauthorized());
        assert!(Failure::Oci(server(401)).unauthorized());
        assert!(Failure::Oci(OciDistributionError::UnauthorizedError {
            url: "http://u/v2/r/manifests/t".into()
        })
        .unauthorized());
        assert!(!Failure::Status(403).unauthorized());
        assert!(!Failure::Oci(OciDistributionError::AuthenticationFailure(
            "bad password".into()
        ))
        .unauthorized());

        let up = Upstream::new(&UpstreamConfig {
            url: "http://127.0.0.1:1".into(),
            credentials_file: None,
            tag_ttl_seconds: 0,
            cache_size: None,
        })
        .unwrap();
        for e in [Failure::Status(404), Failure::Oci(server(404))] {
            let e = up.failed("blob x", e, Code::BlobUnknown);
            assert!(!matches!(e, RegistryError::Upstream(_)), "{e}");
        }
        let e = up.failed("blob x", Failure::Status(503), Code::BlobUnknown);
        assert!(matches!(e, RegistryError::Upstream(_)), "{e}");
        assert!(e.to_string().contains("HTTP 503"), "{e}");
    }
}
