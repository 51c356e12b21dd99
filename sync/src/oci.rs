//! `oci://HOST[:PORT]/REPO[:TAG|@DIGEST]`: the files of a sealed sealvol
//! version on another OCI registry, imported as they are.
//!
//! What follows `oci://` is a qualified ref (SPEC.md §1.1): a tag, a
//! version digest (`@b3:…`, or a prefix of one), the index digest
//! (`@sha256:…`), or nothing for the volume's `head`. [`Source::list`]
//! resolves it once, reads the version index (SPEC.md §5), fetches the
//! tree index and checks it against the version digest, and lists every
//! file of that version, pinned to its version digest, with the file's
//! BLAKE3 as its checksum. [`Source::open`] streams a file's chunk blobs in
//! order, each checked against the length and SHA-256 (its blob name) the
//! tree gives it before a byte of it is passed on. The bytes served are
//! tied to the version digest through the chain (SPEC.md §2.5): the sealer,
//! which re-chunks them for this registry, hashes the whole file anyway and
//! fails it with `CHECKSUM_MISMATCH` unless that hash is the tree's. A
//! format 1 tree (no chaining values) is imported the same way.
//!
//! Only files are copied: the [`Source`] trait carries files, so the
//! source's directories reappear as the folders its files' paths imply
//! (mode `0755`; an empty directory is lost) and its symlinks are left out.
//!
//! Loopback registries (`127.0.0.0/8`, `localhost`, `[::1]`) are reached over
//! plain HTTP, any other over HTTPS, as the client does. A secret is
//! `USER:PASSWORD`, answered to basic or token auth challenges.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sealvol_spec::oci::{self as layout, VersionIndex};
use sealvol_spec::reference::{Selector, Tag, VolumeRef};
use sealvol_spec::tree::{EntryData, TreeIndex};
use sealvol_spec::{B3Digest, ChunkRef, DigestSelector, Sha256Digest};
use sha2::Digest as _;
use tokio::sync::OnceCell;

use crate::http::{self, error_chain, first_line};
use crate::{ByteStream, Checksum, ErrorKind, Object, Source, SourceOptions, SyncError};

/// What a version is made of: an image index whose parts are manifests.
const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
];
/// Chunks fetched ahead of the one being read: the next request overlaps
/// the sealer's work on this one, at most this many chunks (16 MiB each at
/// most) held per file.
const PREFETCH: usize = 2;
/// Tries per chunk before the file fails: one lost connection should not
/// restart a file of thousands of chunks; the job retries beyond that.
const CHUNK_TRIES: u32 = 3;
/// The end of the message of a file whose bytes do not hash to the BLAKE3
/// its tree gives.
const MISMATCH_HINT: &str = "(the tree's BLAKE3); the registry altered it";
/// Tag page size when a digest prefix is resolved.
const TAG_PAGE: usize = 1000;
/// The largest tree index read: a tree of millions of files is tens of
/// MiB; a manifest that claims more is refused before any byte is read.
const MAX_TREE_BYTES: u64 = 256 << 20;

/// A version on a registry.
pub struct OciSource {
    uri: String,
    inner: Arc<Inner>,
}

/// What reading chunks needs, shared with the streams [`Source::open`]
/// returns.
struct Inner {
    uri: String,
    /// `host[:port]` as the URI gives it.
    registry: String,
    /// `namespace/volume`.
    repo: String,
    selector: Selector,
    auth: RegistryAuth,
    client: Client,
    http: reqwest::Client,
    scheme: &'static str,
    /// Whether the registry lets anyone in (see [`Inner::is_open`]).
    open: OnceCell<bool>,
    net: crate::net::NetPolicy,
    /// The tree the last listing read, so each `open` needs no refetch.
    tree: Mutex<Option<(B3Digest, Arc<TreeIndex>)>>,
}

/// The ref an `oci://` URI holds.
fn parse_oci_uri(uri: &str) -> Result<VolumeRef, SyncError> {
    let invalid = |why: String| SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"));
    let rest = uri
        .strip_prefix("oci://")
        .ok_or_else(|| invalid("not an oci:// URI".into()))?;
    let vref: VolumeRef = rest.parse().map_err(|e| {
        invalid(format!(
            "{e}; use oci://HOST[:PORT]/NAMESPACE/VOLUME(:TAG|@DIGEST)"
        ))
    })?;
    if vref.registry.is_none() {
        return Err(invalid(
            "names no registry; use oci://HOST[:PORT]/NAMESPACE/VOLUME(:TAG|@DIGEST)".into(),
        ));
    }
    if vref.path.is_some() {
        return Err(invalid(
            "a sync copies a whole version; drop the path after the tag or digest".into(),
        ));
    }
    Ok(vref)
}

/// What registry auth a secret gives.
fn auth_from(uri: &str, secret: Option<&str>) -> Result<RegistryAuth, SyncError> {
    let Some(secret) = secret
        .map(|s| s.trim_end_matches(['\r', '\n']))
        .filter(|s| !s.is_empty())
    else {
        return Ok(RegistryAuth::Anonymous);
    };
    match secret.split_once(':') {
        Some((user, password)) if !user.is_empty() && !secret.contains(['\r', '\n']) => {
            Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
        }
        _ => Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: the secret must be USER:PASSWORD on one line"),
        )),
    }
}

/// What a registry error means for the job.
fn classify(uri: &str, what: &str, e: OciDistributionError) -> SyncError {
    use OciDistributionError as E;
    let kind = match &e {
        E::RequestError(r) => match r.status() {
            Some(s) => SyncError::from_status(s.as_u16(), String::new()).kind,
            None if r.is_builder() || r.is_redirect() => ErrorKind::InvalidSource,
            None => ErrorKind::Transient,
        },
        E::ServerError { code, .. } => SyncError::from_status(*code, String::new()).kind,
        E::ImageManifestNotFoundError(_) => ErrorKind::NotFound,
        E::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                ErrorKind::NotFound
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                ErrorKind::Denied
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Toomanyrequests))
            {
                ErrorKind::Transient
            } else {
                ErrorKind::InvalidSource
            }
        }
        E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => ErrorKind::Denied,
        E::DigestError(_) => ErrorKind::Checksum,
        // A verifying stream reports a digest mismatch as an I/O error; a
        // body cut short arrives the same way, wrapping reqwest's error.
        E::IoError(io) => match io.get_ref() {
            Some(inner)
                if inner
                    .downcast_ref::<oci_client::errors::DigestError>()
                    .is_some() =>
            {
                ErrorKind::Checksum
            }
            _ => ErrorKind::Transient,
        },
        _ => ErrorKind::InvalidSource,
    };
    let detail = match kind {
        ErrorKind::NotFound => "not found on the registry".to_string(),
        ErrorKind::Denied => {
            format!(
                "access denied ({}); set a USER:PASSWORD secret the registry accepts",
                describe(e)
            )
        }
        _ => describe(e),
    };
    SyncError::new(kind, format!("{uri}: {what}: {detail}"))
}

/// A registry error on one line, without the URLs `oci-client` and reqwest
/// put in their messages (a blob's redirect target can be signed).
fn describe(e: OciDistributionError) -> String {
    use OciDistributionError as E;
    let text = match e {
        E::RequestError(r) => error_chain(&r.without_url()),
        // A body cut short: reqwest's error inside an I/O error.
        E::IoError(io) if io.get_ref().is_some_and(|i| i.is::<reqwest::Error>()) => {
            match io.into_inner().map(|i| i.downcast::<reqwest::Error>()) {
                Some(Ok(r)) => error_chain(&r.without_url()),
                _ => "the download broke off".to_string(),
            }
        }
        E::ServerError { code, message, .. } => format!("HTTP {code}: {message}"),
        E::RegistryError { envelope, .. } => format!("registry error: {envelope}"),
        E::UnauthorizedError { .. } => "not authorized".to_string(),
        other => error_chain(&other),
    };
    first_line(&text)
}

/// Checks a chunk's bytes against the tree: length and blob digest. The
/// file as a whole is checked against its BLAKE3 by the sealer.
fn check_chunk(uri: &str, path: &str, c: &ChunkRef, bytes: &[u8]) -> Result<(), SyncError> {
    let mismatch = |what: String| {
        SyncError::new(
            ErrorKind::Checksum,
            format!(
                "{uri}: {path}: chunk {} at offset {}: {what}; the registry altered it",
                c.sha256, c.offset
            ),
        )
    };
    if bytes.len() as u64 != u64::from(c.length) {
        return Err(mismatch(format!(
            "{} bytes, the tree says {}",
            bytes.len(),
            c.length
        )));
    }
    let sha = Sha256Digest(sha2::Sha256::digest(bytes).into());
    if sha != c.sha256 {
        return Err(mismatch(format!("content has {sha}")));
    }
    Ok(())
}

impl OciSource {
    pub fn new(uri: &str, opts: &SourceOptions) -> Result<Self, SyncError> {
        let vref = parse_oci_uri(uri)?;
        let registry = vref.registry.clone().unwrap_or_default();
        let auth = auth_from(uri, opts.secret.as_deref())?;
        let http_only = sealvol_spec::reference::is_loopback_host(&registry);
        let config = ClientConfig {
            protocol: if http_only {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("sealvol/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        Ok(OciSource {
            uri: uri.to_string(),
            inner: Arc::new(Inner {
                uri: uri.to_string(),
                registry,
                repo: vref.repository(),
                selector: vref.selector,
                auth,
                client: Client::new(config),
                http: http::client(uri, &opts.net)?,
                net: opts.net.clone(),
                scheme: if http_only { "http" } else { "https" },
                open: OnceCell::new(),
                tree: Mutex::new(None),
            }),
        })
    }
}

impl Inner {
    fn by_tag(&self, tag: &str) -> Reference {
        Reference::with_tag(self.registry.clone(), self.repo.clone(), tag.to_string())
    }

    fn by_digest(&self, digest: &Sha256Digest) -> Reference {
        Reference::with_digest(self.registry.clone(), self.repo.clone(), digest.to_string())
    }

    fn error(&self, what: &str, e: OciDistributionError) -> SyncError {
        classify(&self.uri, what, e)
    }

    fn corrupt(&self, what: String) -> SyncError {
        SyncError::new(
            ErrorKind::Checksum,
            format!("{}: {what}; the registry altered it", self.uri),
        )
    }

    fn not_a_version(&self, what: String) -> SyncError {
        SyncError::new(
            ErrorKind::InvalidSource,
            format!(
                "{}: {what}; only sealvol versions can be imported",
                self.uri
            ),
        )
    }

    /// The tag or digest the selector names, and the version digest the
    /// index must carry when the selector gives one.
    async fn target(&self) -> Result<(Reference, Option<B3Digest>), SyncError> {
        Ok(match &self.selector {
            Selector::Head => (self.by_tag("head"), None),
            Selector::Tag(t) => (self.by_tag(t.as_str()), None),
            Selector::Digest(DigestSelector::Sha256(d)) => (self.by_digest(d), None),
            Selector::Digest(DigestSelector::B3(d)) => {
                (self.by_tag(Tag::for_digest(d).as_str()), Some(*d))
            }
            Selector::Digest(sel @ DigestSelector::B3Prefix(_)) => {
                let candidates = self.version_digests().await?;
                let d = sel.resolve(candidates.iter()).map_err(|e| {
                    SyncError::new(ErrorKind::NotFound, format!("{}: {e}", self.uri))
                })?;
                (self.by_tag(Tag::for_digest(&d).as_str()), Some(d))
            }
        })
    }

    /// The version digests the repository's `b3-<hex>` tags name.
    async fn version_digests(&self) -> Result<Vec<B3Digest>, SyncError> {
        let reference = self.by_tag("head");
        let mut tags: Vec<String> = Vec::new();
        self.check_host().await?;
        loop {
            let last = tags.last().cloned();
            let page = self
                .client
                .list_tags(&reference, &self.auth, Some(TAG_PAGE), last.as_deref())
                .await
                .map_err(|e| self.error("listing tags", e))?
                .tags;
            let n = page.len();
            let before = tags.len();
            // A registry that ignores `last` sends the first page again.
            tags.extend(
                page.into_iter()
                    .filter(|t| last.as_deref().is_none_or(|l| t.as_str() > l)),
            );
            if n < TAG_PAGE || tags.len() == before {
                break;
            }
        }
        Ok(tags
            .iter()
            .filter_map(|t| t.strip_prefix("b3-"))
            .filter_map(|hex| format!("b3:{hex}").parse().ok())
            .collect())
    }

    /// A manifest, checked against its digest when fetched by one.
    async fn manifest(&self, reference: &Reference, what: &str) -> Result<Bytes, SyncError> {
        self.check_host().await?;
        let (bytes, _) = self
            .client
            .pull_manifest_raw(reference, &self.auth, MANIFEST_TYPES)
            .await
            .map_err(|e| self.error(what, e))?;
        if let Some(want) = reference.digest() {
            let got = Sha256Digest::of(&bytes).to_string();
            if got != want {
                return Err(self.corrupt(format!("{what} has digest {got}, not {want}")));
            }
        }
        Ok(bytes)
    }

    /// Finds the version the selector names and reads its tree.
    async fn load(&self) -> Result<(B3Digest, Arc<TreeIndex>), SyncError> {
        let (reference, wanted) = self.target().await?;
        let shown = reference
            .digest()
            .or(reference.tag())
            .unwrap_or("head")
            .to_string();
        let what = format!("version index {shown}");
        let bytes = self
            .manifest(&reference, &what)
            .await
            .map_err(|e| match e.kind {
                ErrorKind::NotFound => SyncError::new(
                    ErrorKind::NotFound,
                    format!(
                        "{}: no volume {} with {shown} on {}",
                        self.uri, self.repo, self.registry
                    ),
                ),
                _ => e,
            })?;
        let index =
            VersionIndex::parse(&bytes).map_err(|e| self.not_a_version(format!("{what}: {e}")))?;
        if let Some(w) = wanted {
            if index.digest != w {
                return Err(self.corrupt(format!(
                    "tag {shown} points at version {} instead of {w}",
                    index.digest
                )));
            }
        }
        let tree = self.tree(&index).await?;
        let tree = Arc::new(tree);
        *self.tree.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((index.digest, Arc::clone(&tree)));
        Ok((index.digest, tree))
    }

    /// Fetches the version's tree index and checks it against the version
    /// digest (as the client's `load_tree` does).
    async fn tree(&self, index: &VersionIndex) -> Result<TreeIndex, SyncError> {
        let d = layout::sha256_of(&index.tree_manifest)
            .ok_or_else(|| self.not_a_version("the tree manifest digest is not sha256".into()))?;
        let bytes = self
            .manifest(&self.by_digest(&d), &format!("tree manifest {d}"))
            .await?;
        let layers = layout::artifact_layers(&bytes, layout::MT_TREE_MANIFEST)
            .map_err(|e| self.not_a_version(format!("tree manifest {d}: {e}")))?;
        let [layer] = layers.as_slice() else {
            return Err(self.not_a_version(format!(
                "tree manifest {d} has {} layers, not 1",
                layers.len()
            )));
        };
        let blob = layout::sha256_of(layer)
            .ok_or_else(|| self.not_a_version("the tree blob digest is not sha256".into()))?;
        let what = format!("tree index {blob}");
        if layer.size() > MAX_TREE_BYTES {
            return Err(SyncError::new(
                ErrorKind::InvalidSource,
                format!(
                    "{}: {what}: the tree manifest says it is {} bytes, over the {} MiB this registry reads for a tree",
                    self.uri,
                    layer.size(),
                    MAX_TREE_BYTES >> 20
                ),
            ));
        }
        let bytes = self.blob(&blob, layer.size(), &what).await?;
        let got = Sha256Digest::of(&bytes);
        if got != blob {
            return Err(self.corrupt(format!("{what} has digest {got}")));
        }
        let tree = TreeIndex::decode(&bytes).map_err(|e| self.corrupt(format!("{what}: {e}")))?;
        let actual = tree.version_digest();
        if actual != index.digest {
            return Err(self.corrupt(format!(
                "{what} has version digest {actual}, but the index says {}",
                index.digest
            )));
        }
        Ok(tree)
    }

    /// The tree of version `digest`: the one listed, or, for a source
    /// opened without listing (a resumed job), the one its `b3-` tag names.
    async fn tree_of(&self, digest: &B3Digest) -> Result<Arc<TreeIndex>, SyncError> {
        if let Some((d, t)) = &*self.tree.lock().unwrap_or_else(|p| p.into_inner()) {
            if d == digest {
                return Ok(Arc::clone(t));
            }
        }
        let tag = Tag::for_digest(digest);
        let what = format!("version index {tag}");
        let bytes = self
            .manifest(&self.by_tag(tag.as_str()), &what)
            .await
            .map_err(|e| match e.kind {
                ErrorKind::NotFound => SyncError::new(
                    ErrorKind::Changed,
                    format!(
                        "{}: version {digest} is no longer on {}",
                        self.uri, self.registry
                    ),
                ),
                _ => e,
            })?;
        let index =
            VersionIndex::parse(&bytes).map_err(|e| self.not_a_version(format!("{what}: {e}")))?;
        if index.digest != *digest {
            return Err(self.corrupt(format!("tag {tag} points at version {}", index.digest)));
        }
        let tree = Arc::new(self.tree(&index).await?);
        *self.tree.lock().unwrap_or_else(|p| p.into_inner()) = Some((*digest, Arc::clone(&tree)));
        Ok(tree)
    }

    /// `oci-client` makes its own HTTP client and takes no resolver, so the
    /// registry's addresses are checked before each of its requests
    /// (SPEC.md §8.4); the blob reads of [`Self::http`] are checked as they
    /// connect.
    async fn check_host(&self) -> Result<(), SyncError> {
        self.net.check_host(&self.uri, &self.registry).await
    }

    /// Whether the registry lets anyone in: no credentials, and `GET /v2/`
    /// answers 200 without a challenge. Blobs then go over plain reqwest:
    /// `oci-client` would send a `GET /v2/` before every chunk, since it
    /// caches tokens only and an open registry hands out none.
    async fn is_open(&self) -> bool {
        if !matches!(self.auth, RegistryAuth::Anonymous) {
            return false;
        }
        let probe = || async {
            let url = format!(
                "{}://{}/v2/",
                self.scheme,
                self.by_tag("head").resolve_registry()
            );
            let resp = self.http.get(url).send().await?;
            Ok::<bool, reqwest::Error>(
                resp.status().is_success()
                    && !resp
                        .headers()
                        .contains_key(reqwest::header::WWW_AUTHENTICATE),
            )
        };
        match self.open.get_or_try_init(probe).await {
            Ok(open) => *open,
            // Asked again next time; the oci-client path reports the error.
            Err(_) => false,
        }
    }

    /// A whole blob of `size` bytes; a longer body is cut off (the caller's
    /// length check fails it) so a broken registry cannot fill memory.
    async fn blob(&self, digest: &Sha256Digest, size: u64, what: &str) -> Result<Bytes, SyncError> {
        let capacity = usize::try_from(size).unwrap_or(usize::MAX).min(64 << 20);
        let mut out = BytesMut::with_capacity(capacity);
        let reference = self.by_digest(digest);
        if self.is_open().await {
            let url = format!(
                "{}://{}/v2/{}/blobs/{digest}",
                self.scheme,
                reference.resolve_registry(),
                self.repo
            );
            let mut resp = http::send(self.http.get(url), &self.uri, what, |r| {
                let e = SyncError::from_status(r.status, String::new());
                let detail = match e.kind {
                    ErrorKind::NotFound => "not found on the registry".to_string(),
                    _ => format!("HTTP {}", r.status),
                };
                SyncError::new(e.kind, format!("{}: {what}: {detail}", self.uri))
            })
            .await?;
            while let Some(piece) = resp
                .chunk()
                .await
                .map_err(|e| http::request_error(&self.uri, what, e))?
            {
                out.extend_from_slice(&piece);
                if out.len() as u64 > size {
                    break;
                }
            }
            return Ok(out.freeze());
        }
        self.check_host().await?;
        self.client
            .store_auth_if_needed(&self.registry, &self.auth)
            .await;
        let digest = digest.to_string();
        let mut stream = self
            .client
            .pull_blob_stream(&reference, digest.as_str())
            .await
            .map_err(|e| self.error(what, e))?
            .stream;
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|e| self.error(what, OciDistributionError::IoError(e)))?;
            out.extend_from_slice(&piece);
            if out.len() as u64 > size {
                break;
            }
        }
        Ok(out.freeze())
    }

    /// One chunk of `path`, checked, with a few quick retries of transient
    /// failures.
    async fn chunk(&self, path: &str, c: ChunkRef) -> Result<Bytes, SyncError> {
        let what = format!("{path}: chunk {}", c.sha256);
        let mut pause = Duration::from_millis(500);
        let mut attempt = 1;
        loop {
            match self.blob(&c.sha256, u64::from(c.length), &what).await {
                Ok(bytes) => {
                    check_chunk(&self.uri, path, &c, &bytes)?;
                    return Ok(bytes);
                }
                Err(e) if e.is_transient() && attempt < CHUNK_TRIES => {
                    tracing::debug!(uri = %self.uri, %what, attempt, error = %e, "retrying a chunk");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    attempt += 1;
                }
                // Listed a moment ago as part of an immutable version.
                Err(e) if e.kind == ErrorKind::NotFound => {
                    return Err(SyncError::new(
                        ErrorKind::Changed,
                        format!("{} (deleted since it was listed)", e.message),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[async_trait]
impl Source for OciSource {
    fn uri(&self) -> &str {
        &self.uri
    }

    /// Files are named by their BLAKE3, which the read checks: the same
    /// file on any registry is the same bytes.
    fn reuse_scope(&self) -> Option<String> {
        Some("oci".into())
    }

    async fn list(&self) -> Result<Vec<Object>, SyncError> {
        let (digest, tree) = self.inner.load().await?;
        let version = digest.to_string();
        Ok(tree
            .entries()
            .iter()
            .filter_map(|e| match &e.data {
                EntryData::File { size, blake3, .. } => Some(Object {
                    path: e.path.clone(),
                    key: e.path.clone(),
                    size: *size,
                    // What the version digest covers: bytes that hash to
                    // anything else are not this version's, whatever chunk
                    // blobs they came from.
                    checksum: Some(Checksum::Blake3(blake3.0)),
                    mismatch_hint: Some(MISMATCH_HINT),
                    version: Some(version.clone()),
                    identity: Some(format!("{blake3}:{size}")),
                    mode: e.mode,
                }),
                EntryData::Dir | EntryData::Symlink { .. } => None,
            })
            .collect())
    }

    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError> {
        let inner = &self.inner;
        let digest: B3Digest = object
            .version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                SyncError::new(
                    ErrorKind::InvalidSource,
                    format!(
                        "{}: {}: listed without a version digest",
                        self.uri, object.key
                    ),
                )
            })?;
        let tree = inner.tree_of(&digest).await?;
        let chunks = match tree.get(&object.key).map(|e| &e.data) {
            Some(EntryData::File { chunks, .. }) => chunks.clone(),
            _ => {
                return Err(SyncError::new(
                    ErrorKind::Changed,
                    format!(
                        "{}: {} is not a file of version {digest}",
                        self.uri, object.key
                    ),
                ))
            }
        };
        let inner = Arc::clone(inner);
        let path = object.key.clone();
        Ok(futures_util::stream::iter(chunks)
            .map(move |c| {
                let inner = Arc::clone(&inner);
                let path = path.clone();
                async move { inner.chunk(&path, c).await }
            })
            .buffered(PREFETCH)
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_qualified_refs() {
        let r = parse_oci_uri("oci://127.0.0.1:5000/weights/qwen3-8b:prod").unwrap();
        assert_eq!(r.registry.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(r.repository(), "weights/qwen3-8b");
        assert_eq!(r.selector, Selector::Tag("prod".parse().unwrap()));
        let hex = "ab".repeat(32);
        let r = parse_oci_uri(&format!("oci://reg.example.com/a/b/c@sha256:{hex}")).unwrap();
        assert_eq!(r.repository(), "a/b/c");
        assert!(matches!(
            r.selector,
            Selector::Digest(DigestSelector::Sha256(_))
        ));
        let r = parse_oci_uri(&format!("oci://localhost/ns/vol@b3:{hex}")).unwrap();
        assert!(matches!(
            r.selector,
            Selector::Digest(DigestSelector::B3(_))
        ));
        assert_eq!(
            parse_oci_uri("oci://localhost:5000/ns/vol")
                .unwrap()
                .selector,
            Selector::Head
        );
        for bad in [
            "oci://",
            "oci://ns/vol:tag",
            "oci://bdn:ns/vol",
            "oci://host.io/vol",
            "oci://host.io/NS/vol",
            "oci://host.io/ns/vol:prod/sub/dir",
            "oci://host.io/ns/vol@sha256:xyz",
            "dir:///x",
        ] {
            let e = parse_oci_uri(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{bad}");
            assert!(e.message.starts_with(bad), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn loopback_registries_use_plain_http() {
        let scheme = |registry: &str| {
            let uri = format!("oci://{registry}/a/b:t");
            OciSource::new(&uri, &SourceOptions::default())
                .unwrap()
                .inner
                .scheme
        };
        for l in ["127.0.0.1:5000", "127.1.2.3", "localhost:80", "localhost"] {
            assert_eq!(scheme(l), "http", "{l}");
        }
        for r in [
            "ghcr.io",
            "registry.example.com:5000",
            "10.0.0.1:5000",
            "127.evil.com",
            "127.0.0.1.evil.com:5000",
            "localhost.evil.com",
        ] {
            assert_eq!(scheme(r), "https", "{r}");
        }
        assert!(sealvol_spec::reference::is_loopback_host("[::1]:5000"));
        assert!(sealvol_spec::reference::is_loopback_host("[::1]"));
        assert!(!sealvol_spec::reference::is_loopback_host("[::2]:5000"));
        assert!(!sealvol_spec::reference::is_loopback_host("[::1]x"));
        assert!(!sealvol_spec::reference::is_loopback_host("127.0.0.1:"));
    }

    #[test]
    fn secrets_are_user_and_password() {
        assert!(matches!(
            auth_from("u", None).unwrap(),
            RegistryAuth::Anonymous
        ));
        match auth_from("u", Some("alice:pa:ss\n")).unwrap() {
            RegistryAuth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("alice", "pa:ss")),
            _ => panic!("not basic"),
        }
        for bad in ["token-only", ":nouser", "a:b\nc"] {
            let e = auth_from("oci://h.io/a/b", Some(bad)).err().unwrap();
            assert_eq!(e.kind, ErrorKind::InvalidSource);
            assert!(!e.message.contains(bad), "the secret must not be echoed");
        }
    }

    #[test]
    fn chunks_are_checked_against_the_tree() {
        let data = b"some chunk bytes";
        let c = ChunkRef {
            offset: 0,
            length: data.len() as u32,
            sha256: Sha256Digest::of(data),
        };
        check_chunk("u", "p", &c, data).unwrap();
        assert_eq!(
            check_chunk("u", "p", &c, b"other bytes here")
                .unwrap_err()
                .kind,
            ErrorKind::Checksum
        );
        let e = check_chunk("u", "p", &c, b"short").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checksum);
        assert!(e.message.contains("u: p: chunk"), "{}", e.message);
    }

    #[test]
    fn registry_errors_decide_the_kind() {
        use oci_client::errors::{OciEnvelope, OciError};
        let envelope = |code| OciDistributionError::RegistryError {
            envelope: OciEnvelope {
                errors: vec![OciError {
                    code,
                    message: "m".into(),
                    detail: serde_json::Value::Null,
                }],
            },
            url: "http://h/v2/".into(),
        };
        let kind = |e| classify("oci://h/a/b", "x", e).kind;
        assert_eq!(
            kind(envelope(OciErrorCode::ManifestUnknown)),
            ErrorKind::NotFound
        );
        assert_eq!(kind(envelope(OciErrorCode::Denied)), ErrorKind::Denied);
        assert_eq!(
            kind(envelope(OciErrorCode::Toomanyrequests)),
            ErrorKind::Transient
        );
        let server = |code| OciDistributionError::ServerError {
            code,
            url: "u".into(),
            message: "m".into(),
        };
        assert_eq!(kind(server(503)), ErrorKind::Transient);
        let e = classify(
            "oci://h/a/b",
            "x",
            OciDistributionError::ServerError {
                code: 500,
                url: "https://cdn.example.com/blob?sig=s3cr3t".into(),
                message: "line one\nline two".into(),
            },
        );
        assert_eq!(e.message, "oci://h/a/b: x: HTTP 500: line one");
        assert_eq!(kind(server(404)), ErrorKind::NotFound);
        assert_eq!(kind(server(401)), ErrorKind::Denied);
        assert_eq!(
            kind(OciDistributionError::AuthenticationFailure("no".into())),
            ErrorKind::Denied
        );
        assert_eq!(
            kind(OciDistributionError::IoError(std::io::Error::other(
                "reset"
            ))),
            ErrorKind::Transient
        );
    }
}
