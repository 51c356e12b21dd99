//! The OCI transport: one registry, reached through `oci-client` (auth
//! challenges, scoped bearer tokens, blob and manifest calls, digest
//! checks), plus over its own reqwest what it lacks: tag deletion, and blob
//! calls to an open registry without a `GET /v2/` before each (see
//! [`Remote::is_open`]). Every call is retried with backoff on 5xx, 429,
//! resets and timeouts, and every failure is turned into a
//! [`TransportError`] a user can act on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciEnvelope, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest::{StatusCode, Url};
use sealvol_spec::api::ApiInfo;
use sealvol_spec::oci::next_link;
use sealvol_spec::Sha256Digest;
use sha2::Digest as _;
use tokio::sync::OnceCell;

use crate::credentials;
use crate::TransportError;

/// How many attempts a call gets, and the first pause between them.
const ATTEMPTS: u32 = 4;
/// A mirror gets one retry before the next host is tried.
const MIRROR_ATTEMPTS: u32 = 2;
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// A connection to one registry: clone it freely, clones share the HTTP
/// connection pools, the token cache and what [`Remote::is_open`] learned.
#[derive(Clone)]
pub struct Remote {
    client: Client,
    http: reqwest::Client,
    registry: String,
    auth: RegistryAuth,
    scheme: &'static str,
    open: Arc<OnceCell<bool>>,
    /// What `GET /api/v1` said (SPEC.md §7.3): `None` when the registry has
    /// no volume API. See [`crate::api::info`].
    api: Arc<OnceCell<Option<ApiInfo>>>,
    /// Hosts tried before this registry for reads ([`crate::hosts`]).
    mirrors: Arc<Vec<MirrorHost>>,
    /// Tries per request before an error is final: fewer on a mirror,
    /// which hands over to the next host instead.
    attempts: u32,
}

/// What a blob download checks before it returns the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobCheck {
    /// The blob's sha256, its name: what every writer, and a reader of a
    /// tree without chaining values, relies on.
    Sha256,
    /// Only its length: for a reader that checks every byte it serves
    /// against the version digest through the chain (SPEC.md §2.5) and
    /// checks sha256 only when the chain rejects bytes.
    Length,
}

/// A mirror as a connection of its own.
#[derive(Clone)]
struct MirrorHost {
    remote: Remote,
    resolve: bool,
}

/// A registry's answer to a volume API call (SPEC.md §7): the status and
/// the body, whatever they are; [`crate::volumes`] reads them.
#[derive(Clone, Debug)]
pub struct ApiAnswer {
    pub status: u16,
    pub body: Bytes,
}

/// Plain HTTP is for loopback (the embedded registry's default) or when the
/// user says so; everything else is HTTPS.
pub fn is_loopback(registry: &str) -> bool {
    sealvol_spec::reference::is_loopback_host(registry)
}

impl Remote {
    /// Connects to `registry` (`host[:port]`) with the credentials docker's
    /// config.json holds for it. Nothing is sent until the first call.
    pub fn connect(registry: &str, insecure: bool) -> Result<Remote, TransportError> {
        Remote::connect_with_hosts(registry, insecure, crate::hosts::dir_from_env().as_deref())
    }

    /// [`Remote::connect`] with the mirrors `hosts_dir` configures for the
    /// registry ([`crate::hosts`]), each with its own stored credentials.
    pub fn connect_with_hosts(
        registry: &str,
        insecure: bool,
        hosts_dir: Option<&std::path::Path>,
    ) -> Result<Remote, TransportError> {
        let auth = credentials::auth_for(registry)?;
        let mut remote = Remote::with_auth(registry, insecure, auth)?;
        let Some(dir) = hosts_dir else {
            return Ok(remote);
        };
        let mut mirrors = Vec::new();
        for m in crate::hosts::mirrors(dir, registry)? {
            let auth = credentials::auth_for(&m.host)?;
            let mut mirror = Remote::with_auth(&m.host, m.plain_http, auth)?;
            mirror.attempts = MIRROR_ATTEMPTS;
            mirrors.push(MirrorHost {
                remote: mirror,
                resolve: m.resolve,
            });
        }
        remote.mirrors = Arc::new(mirrors);
        Ok(remote)
    }

    /// The hosts a read tries, in order: the mirrors that may serve it,
    /// then this registry. `resolve` asks for hosts that may resolve tags.
    fn read_hosts(&self, resolve: bool) -> impl Iterator<Item = &Remote> {
        (self.mirrors.iter())
            .filter(move |m| m.resolve || !resolve)
            .map(|m| &m.remote)
            .chain(std::iter::once(self))
    }

    pub fn with_auth(
        registry: &str,
        insecure: bool,
        auth: RegistryAuth,
    ) -> Result<Remote, TransportError> {
        let http_only = insecure || is_loopback(registry);
        let config = ClientConfig {
            protocol: if http_only {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            // One POST and one PUT per blob: chunks are at most 16 MiB, so a
            // chunked upload would only add round trips.
            use_monolithic_push: true,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(120)),
            user_agent: concat!("sealvol/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(120))
            .user_agent(concat!("sealvol/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TransportError::Registry {
                registry: registry.to_string(),
                message: e.to_string(),
            })?;
        Ok(Remote {
            client: Client::new(config),
            http,
            registry: registry.to_string(),
            auth,
            scheme: if http_only { "http" } else { "https" },
            open: Arc::new(OnceCell::new()),
            api: Arc::new(OnceCell::new()),
            mirrors: Arc::new(Vec::new()),
            attempts: ATTEMPTS,
        })
    }

    /// A connection that uses `user`/`password` instead of stored
    /// credentials (`sealvol login`).
    pub fn with_login(
        registry: &str,
        insecure: bool,
        user: &str,
        password: &str,
    ) -> Result<Remote, TransportError> {
        Remote::with_auth(
            registry,
            insecure,
            RegistryAuth::Basic(user.to_string(), password.to_string()),
        )
    }

    /// Checks that the registry accepts this connection's credentials: the
    /// token exchange when it challenges with `Bearer`, else `GET /v2/`.
    pub async fn check_login(&self) -> Result<(), TransportError> {
        let reference = self.by_tag("sealvol/login", "head");
        let token = self
            .client
            .auth(&reference, &self.auth, RegistryOperation::Pull)
            .await
            .map_err(|e| match self.classify("login", e) {
                TransportError::Denied { .. } => TransportError::Credentials(format!(
                    "registry {} rejected the user name or password",
                    self.registry
                )),
                other => other,
            })?;
        let mut req = self
            .http
            .get(format!("{}://{}/v2/", self.scheme, self.registry));
        match (&token, &self.auth) {
            (Some(t), _) => req = req.bearer_auth(t),
            (None, RegistryAuth::Basic(u, p)) => req = req.basic_auth(u, Some(p)),
            _ => {}
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.classify("login", e.into()))?;
        match resp.status().as_u16() {
            200..=299 => Ok(()),
            401 | 403 => Err(TransportError::Credentials(format!(
                "registry {} rejected the user name or password",
                self.registry
            ))),
            status => Err(TransportError::Registry {
                registry: self.registry.clone(),
                message: format!("GET /v2/ answered HTTP {status}"),
            }),
        }
    }

    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// Whether the registry lets anyone in: this connection carries no
    /// credentials and `GET /v2/` answers 200 without a challenge. Asked
    /// once per connection (a failed probe is asked again next time). Blob
    /// calls to an open registry go over plain reqwest: `oci-client` would
    /// send a `GET /v2/` before each one, since it caches tokens only, and
    /// an open registry hands out none.
    async fn is_open(&self) -> bool {
        if !matches!(self.auth, RegistryAuth::Anonymous) {
            return false;
        }
        let probe = || async {
            let url = format!("{}://{}/v2/", self.scheme, self.resolved_registry());
            let resp = self.http.get(url).send().await?;
            Ok::<bool, reqwest::Error>(
                resp.status() == StatusCode::OK
                    && !resp
                        .headers()
                        .contains_key(reqwest::header::WWW_AUTHENTICATE),
            )
        };
        match self.open.get_or_try_init(probe).await {
            Ok(open) => *open,
            Err(e) => {
                tracing::debug!(registry = %self.registry, error = %e, "probing /v2/");
                false
            }
        }
    }

    /// The host `oci-client` sends to (`docker.io` is `index.docker.io`).
    fn resolved_registry(&self) -> String {
        self.by_tag("sealvol/probe", "head")
            .resolve_registry()
            .to_string()
    }

    /// `<scheme>://<registry>/v2/<repo>/blobs/<rest>`, as `oci-client`
    /// builds it.
    fn blob_url(&self, repo: &str, rest: &str) -> Result<Url, TransportError> {
        let url = format!(
            "{}://{}/v2/{repo}/blobs/{rest}",
            self.scheme,
            self.resolved_registry()
        );
        Url::parse(&url).map_err(|e| TransportError::Registry {
            registry: self.registry.clone(),
            message: format!("{url} is not a valid URL: {e}"),
        })
    }

    fn by_tag(&self, repo: &str, tag: &str) -> Reference {
        Reference::with_tag(self.registry.clone(), repo.to_string(), tag.to_string())
    }

    fn by_digest(&self, repo: &str, digest: &str) -> Reference {
        Reference::with_digest(self.registry.clone(), repo.to_string(), digest.to_string())
    }

    /// A reference for `tag` or, when it parses as one, a `sha256:` digest.
    fn reference(&self, repo: &str, tag_or_digest: &str) -> Reference {
        if tag_or_digest.starts_with("sha256:") {
            self.by_digest(repo, tag_or_digest)
        } else {
            self.by_tag(repo, tag_or_digest)
        }
    }

    /// Authenticates once for `repo` (the token is cached by the client).
    async fn authenticate(&self, reference: &Reference, op: RegistryOperation) {
        // Anonymous access to a registry that wants none needs no round trip;
        // otherwise the call answers the registry's challenge up front so
        // parallel calls do not all race to fetch a token.
        if let Err(e) = self.client.auth(reference, &self.auth, op).await {
            tracing::debug!(registry = %self.registry, error = %e, "auth");
        }
    }

    /// Runs `call` until it succeeds, fails for good, or runs out of
    /// attempts; `what` names the object in errors.
    async fn retry<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, TransportError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let mut pause = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let transient = is_transient(&e);
                    if !transient || attempt >= self.attempts {
                        return Err(self.classify(what, e));
                    }
                    tracing::debug!(what, attempt, error = %e, "retrying");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    attempt += 1;
                }
            }
        }
    }

    fn classify(&self, what: &str, e: OciDistributionError) -> TransportError {
        let registry = self.registry.clone();
        match e {
            OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout() => {
                TransportError::Unreachable {
                    registry,
                    message: root_cause(&r),
                }
            }
            OciDistributionError::RequestError(r)
                if r.status().is_some_and(|s| s.as_u16() == 404) =>
            {
                TransportError::NotFound(format!("{what} not found on {registry}"))
            }
            OciDistributionError::RequestError(r)
                if r.status().is_some_and(|s| matches!(s.as_u16(), 401 | 403)) =>
            {
                TransportError::Denied {
                    registry,
                    message: root_cause(&r),
                }
            }
            OciDistributionError::RequestError(r) => TransportError::Registry {
                registry,
                message: format!("{what}: {}", root_cause(&r)),
            },
            OciDistributionError::ImageManifestNotFoundError(_) => {
                TransportError::NotFound(format!("{what} not found on {registry}"))
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                let message = envelope
                    .errors
                    .iter()
                    .map(|e| format!("{:?}: {}", e.code, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::NotFound
                    )
                }) {
                    TransportError::NotFound(format!("{what} not found on {registry}"))
                } else if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
                {
                    TransportError::Denied { registry, message }
                } else if codes.iter().any(|c| matches!(c, OciErrorCode::Unsupported)) {
                    // The registry's reason says what to do instead (a
                    // pull-through cache names its upstream).
                    TransportError::Unsupported {
                        registry,
                        what: match message.is_empty() {
                            true => what.to_string(),
                            false => format!("{what}: {message}"),
                        },
                    }
                } else {
                    TransportError::Registry {
                        registry,
                        message: format!("{what}: {message}"),
                    }
                }
            }
            OciDistributionError::ServerError { code: 404, .. } => {
                TransportError::NotFound(format!("{what} not found on {registry}"))
            }
            OciDistributionError::ServerError { code, message, .. }
                if code == 401 || code == 403 =>
            {
                TransportError::Denied {
                    registry,
                    message: first_line(&message),
                }
            }
            OciDistributionError::ServerError { code, message, .. } => TransportError::Registry {
                registry,
                message: format!("{what}: HTTP {code} {}", first_line(&message)),
            },
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => TransportError::Denied {
                registry,
                message: e.to_string(),
            },
            OciDistributionError::IoError(io) if digest_error(&io).is_some() => {
                TransportError::Corrupt {
                    what: what.to_string(),
                    expected: "its digest".into(),
                    actual: first_line(&digest_error(&io).expect("checked").to_string()),
                }
            }
            OciDistributionError::DigestError(d) => TransportError::Corrupt {
                what: what.to_string(),
                expected: "its digest".into(),
                actual: first_line(&d.to_string()),
            },
            other => TransportError::Registry {
                registry,
                message: format!("{what}: {}", first_line(&other.to_string())),
            },
        }
    }

    /// Fetches a manifest by tag or `sha256:` digest, from the first host
    /// that serves it (mirrors, then the registry; tags only from hosts
    /// that resolve). A manifest fetched by digest is checked against it;
    /// one fetched by tag is returned with the digest of the bytes
    /// received.
    pub async fn manifest(
        &self,
        repo: &str,
        tag_or_digest: &str,
    ) -> Result<(Bytes, Sha256Digest), TransportError> {
        let by_tag = !tag_or_digest.starts_with("sha256:");
        let mut last = None;
        for host in self.read_hosts(by_tag) {
            match host.manifest_here(repo, tag_or_digest).await {
                Ok(found) => return Ok(found),
                Err(e) => {
                    if !std::ptr::eq(host, self) {
                        tracing::warn!(mirror = %host.registry, error = %e, "mirror failed; trying the next host");
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.expect("the registry itself is always tried"))
    }

    async fn manifest_here(
        &self,
        repo: &str,
        tag_or_digest: &str,
    ) -> Result<(Bytes, Sha256Digest), TransportError> {
        let reference = self.reference(repo, tag_or_digest);
        let what = format!("manifest {repo}:{tag_or_digest}");
        let (bytes, _) = self
            .retry(&what, || {
                self.client
                    .pull_manifest_raw(&reference, &self.auth, MANIFEST_TYPES)
            })
            .await?;
        if bytes.len() > sealvol_spec::oci::MAX_MANIFEST_BYTES {
            return Err(TransportError::Corrupt {
                what,
                expected: "a manifest of at most 4 MiB (SPEC.md §5.2)".into(),
                actual: format!("{} bytes", bytes.len()),
            });
        }
        let actual = Sha256Digest::of(&bytes);
        if tag_or_digest.starts_with("sha256:") && actual.to_string() != tag_or_digest {
            return Err(TransportError::Corrupt {
                what,
                expected: tag_or_digest.to_string(),
                actual: actual.to_string(),
            });
        }
        Ok((bytes, actual))
    }

    /// Stores a manifest under a tag or its digest.
    pub async fn put_manifest(
        &self,
        repo: &str,
        tag_or_digest: &str,
        bytes: Bytes,
        media_type: &str,
    ) -> Result<(), TransportError> {
        let reference = self.reference(repo, tag_or_digest);
        let content_type: reqwest::header::HeaderValue =
            media_type
                .parse()
                .map_err(
                    |_: reqwest::header::InvalidHeaderValue| TransportError::Registry {
                        registry: self.registry.clone(),
                        message: format!("invalid media type {media_type:?}"),
                    },
                )?;
        self.retry(&format!("manifest {repo}:{tag_or_digest}"), || {
            self.client
                .push_manifest_raw(&reference, bytes.clone(), content_type.clone())
        })
        .await?;
        Ok(())
    }

    /// Whether `repo` has the blob.
    pub async fn has_blob(
        &self,
        repo: &str,
        digest: &Sha256Digest,
    ) -> Result<bool, TransportError> {
        let digest = digest.to_string();
        let what = format!("blob {digest}");
        if self.is_open().await {
            let url = self.blob_url(repo, &digest)?;
            return self
                .retry(&what, || async {
                    let resp = self.http.head(url.clone()).send().await?;
                    match resp.status() {
                        s if s.is_success() => Ok(true),
                        StatusCode::NOT_FOUND => Ok(false),
                        _ => Err(status_error(resp).await),
                    }
                })
                .await;
        }
        let reference = self.by_digest(repo, &digest);
        self.retry(&what, || self.client.blob_exists(&reference, &digest))
            .await
    }

    /// Asks the registry to link a blob of another repository into `repo`
    /// without sending its bytes. `false` when it would not (the blob is not
    /// there, or the registry does not mount): the caller uploads instead.
    pub async fn mount_blob(&self, repo: &str, from: &str, digest: &Sha256Digest) -> bool {
        let digest = digest.to_string();
        let target = self.by_digest(repo, &digest);
        let source = self.by_digest(from, &digest);
        self.client
            .mount_blob(&target, &source, &digest)
            .await
            .is_ok()
    }

    /// Uploads one blob in a single request after the session POST.
    pub async fn put_blob(
        &self,
        repo: &str,
        digest: &Sha256Digest,
        bytes: Bytes,
    ) -> Result<(), TransportError> {
        let digest = digest.to_string();
        let what = format!("blob {digest}");
        if self.is_open().await {
            let start = self.blob_url(repo, "uploads/")?;
            return self
                .retry(&what, || self.upload_open(&start, &digest, bytes.clone()))
                .await;
        }
        let reference = self.by_digest(repo, &digest);
        self.retry(&what, || {
            self.client.push_blob(&reference, bytes.clone(), &digest)
        })
        .await?;
        Ok(())
    }

    /// A monolithic upload to an open registry: `POST` opens the session,
    /// one `PUT` to its `Location` carries the bytes and the digest.
    async fn upload_open(
        &self,
        start: &Url,
        digest: &str,
        bytes: Bytes,
    ) -> Result<(), OciDistributionError> {
        let resp = self
            .http
            .post(start.clone())
            .header(reqwest::header::CONTENT_LENGTH, 0)
            .send()
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(unexpected(resp, StatusCode::ACCEPTED).await);
        }
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .ok_or(OciDistributionError::RegistryNoLocationError)?
            .to_str()?;
        // Relative to the session URL, and it may carry a query already.
        let mut url = start
            .join(location)
            .map_err(|e| OciDistributionError::UrlParseError(format!("{location}: {e}")))?;
        url.query_pairs_mut().append_pair("digest", digest);
        let resp = self
            .http
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes)
            .send()
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(unexpected(resp, StatusCode::CREATED).await);
        }
        Ok(())
    }

    /// Downloads a whole blob from the first host that serves it (mirrors,
    /// then the registry), checking its sha256 while it streams (our own
    /// hasher from an open registry, `oci-client`'s otherwise); a mismatch
    /// is [`TransportError::Corrupt`], not retried on that host.
    pub async fn get_blob(
        &self,
        repo: &str,
        digest: &Sha256Digest,
        size: u64,
    ) -> Result<Vec<u8>, TransportError> {
        self.get_blob_as(repo, digest, size, BlobCheck::Sha256)
            .await
    }

    /// [`Remote::get_blob`], checking the bytes as `check` says: with
    /// [`BlobCheck::Length`] only their length, for a reader that checks
    /// every byte it uses through the chain (SPEC.md §2.5) and so would
    /// hash each byte twice.
    pub async fn get_blob_as(
        &self,
        repo: &str,
        digest: &Sha256Digest,
        size: u64,
        check: BlobCheck,
    ) -> Result<Vec<u8>, TransportError> {
        let mut last = None;
        for host in self.read_hosts(false) {
            match host.get_blob_here(repo, digest, size, check).await {
                Ok(bytes) => return Ok(bytes),
                Err(e) => {
                    if !std::ptr::eq(host, self) {
                        tracing::warn!(mirror = %host.registry, error = %e, "mirror failed; trying the next host");
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.expect("the registry itself is always tried"))
    }

    async fn get_blob_here(
        &self,
        repo: &str,
        digest: &Sha256Digest,
        size: u64,
        check: BlobCheck,
    ) -> Result<Vec<u8>, TransportError> {
        use futures_util::StreamExt as _;
        let hash = check == BlobCheck::Sha256;
        let digest = digest.to_string();
        let what = format!("blob {digest}");
        // Sizes come from manifests a registry wrote: refuse what no blob of
        // a version can be (the largest is a tree index, SPEC.md §2.4)
        // before allocating for it.
        if size > sealvol_spec::tree::MAX_TREE_BYTES {
            return Err(TransportError::Corrupt {
                what,
                expected: "at most 1 GiB".into(),
                actual: format!("{size} bytes"),
            });
        }
        if self.is_open().await {
            let url = self.blob_url(repo, &digest)?;
            let (out, actual) = self
                .retry(&what, || async {
                    let mut resp = self.http.get(url.clone()).send().await?;
                    if !resp.status().is_success() {
                        return Err(status_error(resp).await);
                    }
                    let mut hasher = hash.then(sha2::Sha256::new);
                    let mut out = crate::buffers::take(size as usize);
                    // A body cut short is an I/O error, retried as on the
                    // oci-client path (reqwest calls it a decode error).
                    let read = |e| OciDistributionError::IoError(std::io::Error::other(e));
                    while let Some(piece) = resp.chunk().await.map_err(read)? {
                        if let Some(h) = hasher.as_mut() {
                            h.update(&piece);
                        }
                        out.extend_from_slice(&piece);
                        if out.len() as u64 > size {
                            // Longer than promised: no need to read the rest.
                            break;
                        }
                    }
                    let actual = hasher.map(|h| format!("sha256:{}", hex::encode(h.finalize())));
                    Ok((out, actual))
                })
                .await?;
            check_len(&what, size, out.len())?;
            if let Some(actual) = actual.filter(|a| *a != digest) {
                return Err(TransportError::Corrupt {
                    what,
                    expected: digest,
                    actual,
                });
            }
            return Ok(out);
        }
        let reference = self.by_digest(repo, &digest);
        let out = self
            .retry(&what, || async {
                let mut stream = if hash {
                    self.client
                        .pull_blob_stream(&reference, digest.as_str())
                        .await?
                        .stream
                } else if size == 0 {
                    return Ok(crate::buffers::take(0));
                } else {
                    // A range of the whole blob: oci-client checks the
                    // digest of a full response and leaves a partial one
                    // to the caller, which is what is asked for here.
                    match self
                        .client
                        .pull_blob_stream_partial(&reference, digest.as_str(), 0, Some(size))
                        .await?
                    {
                        oci_client::client::BlobResponse::Full(s)
                        | oci_client::client::BlobResponse::Partial(s) => s.stream,
                    }
                };
                let mut out = crate::buffers::take(size as usize);
                while let Some(piece) = stream.next().await {
                    out.extend_from_slice(&piece.map_err(OciDistributionError::IoError)?);
                }
                Ok(out)
            })
            .await?;
        check_len(&what, size, out.len())?;
        Ok(out)
    }

    /// Every tag of `repo`, following pagination. A repository that does not
    /// exist has no tags.
    pub async fn tags(&self, repo: &str) -> Result<Vec<String>, TransportError> {
        let reference = self.by_tag(repo, "head");
        let what = format!("tags of {repo}");
        let mut all = paginate(|last| {
            let (reference, what) = (&reference, &what);
            async move {
                match self
                    .retry(what, || {
                        self.client
                            .list_tags(reference, &self.auth, Some(PAGE), last.as_deref())
                    })
                    .await
                {
                    Ok(p) => Ok(p.tags),
                    Err(TransportError::NotFound(_)) => Ok(Vec::new()),
                    Err(e) => Err(e),
                }
            }
        })
        .await?;
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// Every repository of the registry (`/v2/_catalog`), following
    /// pagination.
    pub async fn catalog(&self) -> Result<Vec<String>, TransportError> {
        let reference = self.by_tag("library/catalog", "latest");
        paginate(|last| {
            let reference = &reference;
            async move {
                self.retry("the repository catalog", || {
                    self.client
                        .catalog(reference, &self.auth, Some(PAGE), last.as_deref())
                })
                .await
                .map(|p| p.repositories)
                .map_err(|e| match e {
                    TransportError::NotFound(_) => TransportError::Unsupported {
                        registry: self.registry.clone(),
                        what: "listing repositories (/v2/_catalog)".into(),
                    },
                    e => e,
                })
            }
        })
        .await
    }

    /// Deletes a tag (not the manifest it points to). CNCF distribution 2.8
    /// does not implement this and says so with `UNSUPPORTED`.
    pub async fn delete_tag(&self, repo: &str, tag: &str) -> Result<(), TransportError> {
        let reference = self.by_tag(repo, tag);
        let token = self
            .client
            .auth(&reference, &self.auth, RegistryOperation::Push)
            .await
            .ok()
            .flatten();
        let url = format!(
            "{}://{}/v2/{repo}/manifests/{tag}",
            self.scheme, self.registry
        );
        let what = format!("tag {repo}:{tag}");
        let mut pause = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let mut req = self.http.delete(&url);
            match (&token, &self.auth) {
                (Some(t), _) => req = req.bearer_auth(t),
                (None, RegistryAuth::Basic(u, p)) => req = req.basic_auth(u, Some(p)),
                _ => {}
            }
            let result = req.send().await;
            let retry = match &result {
                Ok(r) => r.status().is_server_error() || r.status().as_u16() == 429,
                Err(e) => !e.is_connect(),
            };
            if retry && attempt < ATTEMPTS {
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
                continue;
            }
            let resp = result.map_err(|e| self.classify(&what, e.into()))?;
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            return match status {
                200..=299 => Ok(()),
                404 if body.contains("MANIFEST_UNKNOWN") || body.contains("NAME_UNKNOWN") => Err(
                    TransportError::NotFound(format!("{what} not found on {}", self.registry)),
                ),
                // distribution 2.8 deletes manifests by digest only, and
                // answers a tag with DIGEST_INVALID.
                400 | 404 | 405
                    if status == 405
                        || body.contains("UNSUPPORTED")
                        || body.contains("DIGEST_INVALID") =>
                {
                    Err(TransportError::Unsupported {
                        registry: self.registry.clone(),
                        what: "deleting tags (only manifests by digest)".into(),
                    })
                }
                401 | 403 => Err(TransportError::Denied {
                    registry: self.registry.clone(),
                    message: first_line(&body),
                }),
                _ => Err(TransportError::Registry {
                    registry: self.registry.clone(),
                    message: format!("deleting {what}: HTTP {status} {}", first_line(&body)),
                }),
            };
        }
    }

    /// The referrers of manifest `subject` in `repo` whose `artifactType`
    /// is `artifact_type` (OCI distribution 1.1), and whether the registry
    /// has the referrers API. Without it (the endpoint answers 404) they are
    /// read from the referrers tag schema's index, tagged `sha256-<hex>`,
    /// and filtered here; no such tag means none. Each page is at most the
    /// manifest limit (SPEC.md §5.2), and at most [`REFERRER_PAGES`] pages
    /// are read.
    pub async fn referrers(
        &self,
        repo: &str,
        subject: &Sha256Digest,
        artifact_type: &str,
    ) -> Result<(Vec<sealvol_spec::oci::OciDescriptor>, bool), TransportError> {
        let what = format!("referrers of {repo}@{subject}");
        let reference = self.by_digest(repo, &subject.to_string());
        let token = match self.is_open().await {
            true => None,
            false => self
                .client
                .auth(&reference, &self.auth, RegistryOperation::Pull)
                .await
                .ok()
                .flatten(),
        };
        let mut url = self.v2_url(&format!("{repo}/referrers/{subject}"))?;
        url.query_pairs_mut()
            .append_pair("artifactType", artifact_type);
        let mut found = Vec::new();
        for _ in 0..REFERRER_PAGES {
            let page = self
                .retry(&what, || self.get_bounded(url.clone(), token.as_deref()))
                .await;
            let (body, next) = match page {
                Ok(p) => p,
                Err(TransportError::NotFound(_)) if found.is_empty() => {
                    return Ok((
                        self.referrers_by_tag(repo, subject, artifact_type).await?,
                        false,
                    ))
                }
                Err(e) => return Err(e),
            };
            let page = sealvol_spec::oci::referrers_in(&body, artifact_type).map_err(|e| {
                TransportError::Registry {
                    registry: self.registry.clone(),
                    message: format!("{what}: {e}"),
                }
            })?;
            found.extend(page);
            match next {
                Some(n) => {
                    url = url.join(&n).map_err(|e| TransportError::Registry {
                        registry: self.registry.clone(),
                        message: format!("{what}: bad Link {n:?}: {e}"),
                    })?
                }
                None => break,
            }
        }
        Ok((found, true))
    }

    /// The referrers tag schema's index of `subject`, filtered.
    async fn referrers_by_tag(
        &self,
        repo: &str,
        subject: &Sha256Digest,
        artifact_type: &str,
    ) -> Result<Vec<sealvol_spec::oci::OciDescriptor>, TransportError> {
        let tag = referrers_tag(subject);
        match self.manifest(repo, &tag).await {
            Ok((bytes, _)) => match sealvol_spec::oci::referrers_in(&bytes, artifact_type) {
                Ok(found) => Ok(found),
                // Not an index: not the tag schema's, so no referrers.
                Err(e) => {
                    tracing::debug!(repo, tag, error = %e, "referrers tag holds no index");
                    Ok(Vec::new())
                }
            },
            Err(TransportError::NotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// `<scheme>://<registry>/v2/<rest>`.
    fn v2_url(&self, rest: &str) -> Result<Url, TransportError> {
        let url = format!("{}://{}/v2/{rest}", self.scheme, self.resolved_registry());
        Url::parse(&url).map_err(|e| TransportError::Registry {
            registry: self.registry.clone(),
            message: format!("{url} is not a valid URL: {e}"),
        })
    }

    /// A `GET` of a JSON document of at most the manifest limit: its body
    /// and the `rel="next"` target of its `Link` header.
    async fn get_bounded(
        &self,
        url: Url,
        token: Option<&str>,
    ) -> Result<(Vec<u8>, Option<String>), OciDistributionError> {
        let max = sealvol_spec::oci::MAX_MANIFEST_BYTES;
        let mut req = self.http.get(url).header(
            reqwest::header::ACCEPT,
            "application/vnd.oci.image.index.v1+json",
        );
        match (token, &self.auth) {
            (Some(t), _) => req = req.bearer_auth(t),
            (None, RegistryAuth::Bearer(t)) => req = req.bearer_auth(t),
            (None, RegistryAuth::Basic(u, p)) => req = req.basic_auth(u, Some(p)),
            _ => {}
        }
        let mut resp = req.send().await?;
        if !resp.status().is_success() {
            return Err(status_error(resp).await);
        }
        let next = resp
            .headers()
            .get(reqwest::header::LINK)
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        let too_large = |n: u64| {
            OciDistributionError::SpecViolationError(format!(
                "a referrers list of {n} bytes or more, over the {max}-byte limit"
            ))
        };
        if let Some(n) = resp.content_length().filter(|&n| n > max as u64) {
            return Err(too_large(n));
        }
        let read = |e| OciDistributionError::IoError(std::io::Error::other(e));
        let mut body = Vec::new();
        while let Some(piece) = resp.chunk().await.map_err(read)? {
            if body.len() + piece.len() > max {
                return Err(too_large((body.len() + piece.len()) as u64));
            }
            body.extend_from_slice(&piece);
        }
        Ok((body, next))
    }

    /// What this connection learned of the registry's volume API.
    pub(crate) fn api_info_cell(&self) -> &OnceCell<Option<ApiInfo>> {
        &self.api
    }

    /// Sends one volume API call (SPEC.md §7) to
    /// `<scheme>://<registry>/api/v1<path>` and returns whatever the
    /// registry answered; only a registry that cannot be reached, or keeps
    /// answering 5xx or 429 through every attempt, is an error. `repo`, when
    /// the call is about one volume, scopes the bearer token a registry
    /// with token auth hands out; basic credentials are sent as they are.
    pub async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        repo: Option<&str>,
        body: Option<&serde_json::Value>,
    ) -> Result<ApiAnswer, TransportError> {
        let body = body.map(|b| ("application/json", Bytes::from(b.to_string())));
        self.api_call(method, path, repo, body).await
    }

    /// [`Remote::api`] with a body that is not JSON: `body` goes as it is,
    /// labelled `content_type` (a secret's value, SPEC.md §8.3).
    pub async fn api_raw(
        &self,
        method: reqwest::Method,
        path: &str,
        repo: Option<&str>,
        content_type: &str,
        body: Bytes,
    ) -> Result<ApiAnswer, TransportError> {
        self.api_call(method, path, repo, Some((content_type, body)))
            .await
    }

    /// What [`Remote::api`] and [`Remote::api_raw`] send: the body, when
    /// there is one, with its content type.
    async fn api_call(
        &self,
        method: reqwest::Method,
        path: &str,
        repo: Option<&str>,
        body: Option<(&str, Bytes)>,
    ) -> Result<ApiAnswer, TransportError> {
        // The volume API's registry takes Basic credentials on every
        // endpoint (SPEC.md §7.5): sending them as they are covers calls
        // that need `delete` or admin, which a push-scoped token would not.
        let token = match (&self.auth, repo) {
            (RegistryAuth::Anonymous | RegistryAuth::Basic(..), _) | (_, None) => None,
            (_, Some(repo)) => self
                .client
                .auth(
                    &self.by_tag(repo, "head"),
                    &self.auth,
                    RegistryOperation::Push,
                )
                .await
                .ok()
                .flatten(),
        };
        let url = format!("{}://{}/api/v1{path}", self.scheme, self.registry);
        let what = format!("{method} /api/v1{path}");
        let mut pause = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let mut req = self.http.request(method.clone(), &url);
            match (&token, &self.auth) {
                (Some(t), _) | (None, RegistryAuth::Bearer(t)) => req = req.bearer_auth(t),
                (None, RegistryAuth::Basic(u, p)) => req = req.basic_auth(u, Some(p)),
                _ => {}
            }
            match &body {
                Some((content_type, b)) => {
                    req = req
                        .header(reqwest::header::CONTENT_TYPE, *content_type)
                        .body(b.clone());
                }
                // The registry refuses a write without a JSON content type
                // (a web page can forge those, SPEC.md §7.5), body or not.
                None if method != reqwest::Method::GET && method != reqwest::Method::HEAD => {
                    req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
                }
                None => {}
            }
            let result = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    resp.bytes().await.map(|body| ApiAnswer {
                        status: status.as_u16(),
                        body,
                    })
                }
                Err(e) => Err(e),
            };
            let retry = match &result {
                Ok(a) => a.status >= 500 || a.status == 429,
                // Refused: the registry is not there, and says so at once.
                Err(e) => !e.is_connect(),
            };
            if retry && attempt < ATTEMPTS {
                tracing::debug!(what, attempt, "retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
                continue;
            }
            let answer = result.map_err(|e| self.classify(&what, e.into()))?;
            return match answer.status {
                429 | 500.. => Err(TransportError::Registry {
                    registry: self.registry.clone(),
                    message: format!(
                        "{what}: HTTP {} {}",
                        answer.status,
                        first_line(&String::from_utf8_lossy(&answer.body))
                    ),
                }),
                _ => Ok(answer),
            };
        }
    }

    /// Answers the registry's auth challenge for `repo` before a burst of
    /// parallel calls.
    pub async fn prepare(&self, repo: &str, push: bool) {
        let reference = self.by_tag(repo, "head");
        let op = if push {
            RegistryOperation::Push
        } else {
            RegistryOperation::Pull
        };
        self.authenticate(&reference, op).await;
    }
}

/// Re-exported for the client's readers of referrers.
pub use sealvol_spec::oci::{referrers_tag, REFERRER_PAGES};

/// Page size for tag and repository lists.
const PAGE: usize = 1000;

/// Follows `?n=&last=` pagination: asks for pages after the last name seen
/// until a short page, or one that brings nothing new (a registry that
/// ignores `last`).
async fn paginate<F, Fut>(mut page: F) -> Result<Vec<String>, TransportError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>, TransportError>>,
{
    let mut all: Vec<String> = Vec::new();
    loop {
        let last = all.last().cloned();
        let names = page(last.clone()).await?;
        let n = names.len();
        let before = all.len();
        all.extend(
            names
                .into_iter()
                .filter(|t| last.as_deref().is_none_or(|l| t.as_str() > l)),
        );
        if n < PAGE || all.len() == before {
            return Ok(all);
        }
    }
}

/// What a reader accepts: a version is an image index, its parts are image
/// manifests.
const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
];

/// The digest mismatch a verifying blob stream reports as an I/O error.
fn digest_error(io: &std::io::Error) -> Option<&oci_client::errors::DigestError> {
    io.get_ref()?.downcast_ref()
}

fn is_transient(e: &OciDistributionError) -> bool {
    match e {
        // A body cut short (a reset mid-stream) is worth another try; a
        // digest mismatch is not.
        OciDistributionError::IoError(io) => io
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<reqwest::Error>().is_some()),
        // `blob_exists` and `pull_blob` report HTTP errors as reqwest
        // status errors rather than as registry errors.
        OciDistributionError::RequestError(r) => match r.status() {
            Some(status) => status.is_server_error() || status.as_u16() == 429,
            None => r.is_timeout() || r.is_connect() || r.is_request() || r.is_body(),
        },
        OciDistributionError::ServerError { code, .. } => *code >= 500 || *code == 429,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Toomanyrequests)),
        _ => false,
    }
}

/// A length check on a downloaded blob: the wrong length is
/// [`TransportError::Corrupt`].
fn check_len(what: &str, size: u64, len: usize) -> Result<(), TransportError> {
    if len as u64 == size {
        return Ok(());
    }
    Err(TransportError::Corrupt {
        what: what.to_string(),
        expected: format!("{size} bytes"),
        actual: format!("{len} bytes"),
    })
}

/// An error answer from the registry as `oci-client` reports one, so that
/// [`Remote::retry`] and [`Remote::classify`] treat both paths alike: a
/// client error with the OCI error JSON is a registry error, anything else
/// (429 and 5xx included, which are retried) a server error.
async fn status_error(resp: reqwest::Response) -> OciDistributionError {
    let status = resp.status();
    let url = resp.url().to_string();
    let body = resp.bytes().await.unwrap_or_default();
    if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
        if let Ok(envelope) = serde_json::from_slice::<OciEnvelope>(&body) {
            return OciDistributionError::RegistryError { envelope, url };
        }
    }
    OciDistributionError::ServerError {
        code: status.as_u16(),
        url,
        message: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A response other than `expected`: an error answer, or a success the
/// OCI distribution spec does not allow there.
async fn unexpected(resp: reqwest::Response, expected: StatusCode) -> OciDistributionError {
    if resp.status().is_success() {
        return OciDistributionError::SpecViolationError(format!(
            "expected HTTP {expected}, got {} from {}",
            resp.status(),
            resp.url()
        ));
    }
    status_error(resp).await
}

/// The innermost cause of a reqwest error: "Connection refused (os error
/// 111)" rather than "error sending request for url (…)".
fn root_cause(e: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    first_line(&source.to_string())
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.len() > 300 {
        format!("{}…", &line[..line.floor_char_boundary_compat(300)])
    } else {
        line.to_string()
    }
}

trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}

impl FloorCharBoundary for str {
    fn floor_char_boundary_compat(&self, mut i: usize) -> usize {
        while !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_use_plain_http() {
        for r in [
            "127.0.0.1:5000",
            "localhost",
            "localhost:5000",
            "127.0.0.2:80",
            "[::1]:5000",
        ] {
            assert!(is_loopback(r), "{r}");
        }
        for r in ["ghcr.io", "registry.example.com:5000", "10.0.0.1:5000"] {
            assert!(!is_loopback(r), "{r}");
        }
    }

    #[test]
    fn link_headers_give_the_next_page() {
        assert_eq!(
            next_link(r#"</v2/a/referrers/sha256:1?n=1&last=x>; rel="next""#).as_deref(),
            Some("/v2/a/referrers/sha256:1?n=1&last=x")
        );
        assert_eq!(next_link(r#"<http://x/>; rel="prev""#), None);
        assert_eq!(next_link("garbage"), None);
        let d: Sha256Digest =
            "sha256:0000000000000000000000000000000000000000000000000000000000000000"
                .parse()
                .unwrap();
        assert_eq!(referrers_tag(&d), format!("sha256-{}", "0".repeat(64)));
    }

    #[test]
    fn first_line_is_short_and_single() {
        assert_eq!(first_line("\n  a b \nsecond"), "a b");
        let long = "é".repeat(400);
        assert!(first_line(&long).chars().count() <= 301);
    }
}
