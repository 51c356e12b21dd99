//! `s3://`, `r2://`, `cw://` and `azure://` through `object_store`, and the
//! options every object-store URI takes (`?endpoint=`, `?region=`,
//! `?checksum=none`, SPEC.md §8.1). An `s3://`, `r2://` or `cw://` job
//! without a secret uses workload identity when the registry's
//! environment configures it ([`crate::aws_identity`]); an `azure://` job
//! without one uses Azure's federated tokens ([`AzureIdentity`]), which
//! `object_store` exchanges itself.
//!
//! Not the `gs://` source: that one has its own module, since
//! `object_store` reads GCS through its XML API, which the GCS emulators do
//! not serve, and its listing drops the `md5Hash` the JSON API gives for
//! every object.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;
use object_store::{ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, RetryConfig};

use crate::http::{error_chain, first_line};
use crate::net::refused_in;
use crate::source::tree_path;
use crate::{ByteStream, Checksum, ErrorKind, Object, Source, SourceOptions, SyncError};

/// A bucket (or container) prefix.
pub struct StoreSource {
    uri: String,
    store: Arc<dyn ObjectStore>,
    prefix: Option<StorePath>,
    /// Whether an ETag of 32 hex digits is the object's MD5 (S3, single
    /// part), and is checked.
    etag_is_md5: bool,
    /// The role whose credentials sign the requests, when they come from
    /// workload identity: a refusal names it.
    role: Option<String>,
    /// The Azure application whose tokens authorize the requests, when
    /// they come from a federated token: a refusal names it.
    azure_identity: Option<AzureIdentity>,
    /// Where ETags are unique ([`Source::reuse_scope`]): the scheme, the
    /// endpoint and the bucket (account and container); `None` with
    /// `?checksum=none` (SPEC.md §8.5).
    scope: Option<String>,
}

/// What a checksum mismatch of an S3 object adds: the ETag may not be an
/// MD5 at all.
const ETAG_HINT: &str = "(objects encrypted with SSE-KMS or SSE-C have ETags that are not MD5s: add ?checksum=none to the source URI)";

/// The parts of `scheme://authority/rest?endpoint=…&region=…&checksum=none`.
#[derive(Debug)]
pub(crate) struct ParsedUri {
    pub authority: String,
    pub path: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// False with `?checksum=none`: the source's checksums (ETags, MD5s)
    /// are not checked; sizes still are.
    pub verify_checksums: bool,
}

pub(crate) fn parse_uri(uri: &str) -> Result<ParsedUri, SyncError> {
    let invalid = |why: &str| SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"));
    let url = url::Url::parse(uri).map_err(|e| invalid(&e.to_string()))?;
    let authority = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| invalid("names no bucket"))?
        .to_string();
    let path = percent_decode(url.path().trim_matches('/'));
    let (mut endpoint, mut region, mut verify_checksums) = (None, None, true);
    for (k, v) in url.query_pairs() {
        match &*k {
            "endpoint" => endpoint = Some(v.into_owned()),
            "region" => region = Some(v.into_owned()),
            "checksum" if v == "none" => verify_checksums = false,
            "checksum" => {
                return Err(invalid(&format!(
                    "checksum={v}: the one value is none (the source's checksums are not checked; sizes are)"
                )))
            }
            other => {
                return Err(invalid(&format!(
                    "unknown option {other}; use endpoint=, region= or checksum=none"
                )))
            }
        }
    }
    Ok(ParsedUri {
        authority,
        path,
        endpoint,
        region,
        verify_checksums,
    })
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Endpoints the registry host's environment sets for `object_store`.
fn env_endpoints() -> Vec<String> {
    [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT",
        "AZURITE_BLOB_STORAGE_URL",
    ]
    .iter()
    .filter_map(|v| std::env::var(v).ok())
    .filter(|v| !v.trim().is_empty())
    .collect()
}

/// Azure workload identity (SPEC.md §8.1), as the Azure SDKs and the AKS
/// webhook configure it: `AZURE_FEDERATED_TOKEN_FILE` (a projected
/// service-account token), `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`, and
/// `AZURE_AUTHORITY_HOST` (default `https://login.microsoftonline.com`).
/// `object_store` does the exchange (a client-credentials grant with the
/// token as `client_assertion` at `AUTHORITY/TENANT/oauth2/v2.0/token`),
/// reads the file anew for each, and keeps the token until 5 minutes
/// before it expires; its requests go through the job's client, so the
/// resolver of SPEC.md §8.4 checks the authority's addresses. What is
/// ours: when it applies, the check of an authority that is an IP literal
/// or plain HTTP, and what a refusal says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureIdentity {
    pub token_file: String,
    pub client_id: String,
    pub tenant_id: String,
    /// Without a trailing `/`: `object_store` appends `/TENANT/…`, and the
    /// AKS webhook sets it with one.
    pub authority_host: String,
}

impl AzureIdentity {
    /// The settings from `var` (the environment); `None` unless all of the
    /// file, the client and the tenant are set.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<AzureIdentity>, SyncError> {
        let var = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let (Some(token_file), Some(client_id), Some(tenant_id)) = (
            var("AZURE_FEDERATED_TOKEN_FILE"),
            var("AZURE_CLIENT_ID"),
            var("AZURE_TENANT_ID"),
        ) else {
            return Ok(None);
        };
        let authority_host = var("AZURE_AUTHORITY_HOST")
            .unwrap_or_else(|| "https://login.microsoftonline.com".to_string())
            .trim_end_matches('/')
            .to_string();
        let url = url::Url::parse(&authority_host).ok();
        let loopback = url
            .as_ref()
            .and_then(|u| u.host_str())
            .is_some_and(sealvol_spec::reference::is_loopback_host);
        match url.as_ref().map(|u| u.scheme()) {
            Some("https") => {}
            Some("http") if loopback => {}
            _ => {
                return Err(SyncError::new(
                    ErrorKind::InvalidSource,
                    format!("Azure workload identity: AZURE_AUTHORITY_HOST {authority_host:?} must be an https:// URL (plain http:// only to a loopback address)"),
                ))
            }
        }
        Ok(Some(AzureIdentity {
            token_file,
            client_id,
            tenant_id,
            authority_host,
        }))
    }

    /// Who the tokens speak for, for messages.
    fn name(&self) -> String {
        format!(
            "client {} in tenant {} (Azure workload identity)",
            self.client_id, self.tenant_id
        )
    }

    /// What `e`, an error getting a token, means for the job, if it is
    /// one: a refused exchange is `SOURCE_DENIED`, naming the client and
    /// tenant; an unreachable or failing endpoint is worth retrying. The
    /// text of the answer is not repeated: it could echo the assertion.
    fn token_error(&self, uri: &str, what: &str, e: &object_store::Error) -> Option<SyncError> {
        let text = error_chain(e);
        let fail = |kind, why: String| {
            Some(SyncError::new(
                kind,
                format!("{uri}: {what}: {}: {why}", self.name()),
            ))
        };
        if text.contains("Error reading federated token file") {
            return fail(
                ErrorKind::Denied,
                format!(
                    "cannot read the federated token file {} (AZURE_FEDERATED_TOKEN_FILE)",
                    self.token_file
                ),
            );
        }
        if text.contains("Error getting token response body") {
            return fail(
                ErrorKind::InvalidSource,
                format!(
                    "the token endpoint {} answered no token",
                    self.authority_host
                ),
            );
        }
        if !text.contains("Error performing token request") {
            return None;
        }
        match status_in(&format!("{e:?}")) {
            Some(s @ (408 | 429 | 500..=599)) => fail(
                ErrorKind::Transient,
                format!("the token endpoint {} answered HTTP {s}", self.authority_host),
            ),
            Some(s) => fail(
                ErrorKind::Denied,
                format!(
                    "the token exchange at {} was refused (HTTP {s}); check the application's federated credential (issuer and subject of the token) and the tenant",
                    self.authority_host
                ),
            ),
            None => fail(
                ErrorKind::Transient,
                format!("the token endpoint {} is unreachable", self.authority_host),
            ),
        }
    }
}

/// Retries inside `object_store` are few and short: the job retries a
/// whole object with its own backoff and reports it.
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

impl StoreSource {
    pub fn new(uri: &str, opts: &SourceOptions) -> Result<StoreSource, SyncError> {
        let scheme = uri.split_once("://").map_or("", |(s, _)| s);
        let p = parse_uri(uri)?;
        let invalid =
            |why: String| SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"));
        let built = |e: object_store::Error| invalid(e.to_string());
        // Names are checked as they resolve (SPEC.md §8.4); an endpoint
        // that is an IP literal resolves nothing and is checked here.
        let client_options = ClientOptions::new().with_dns_resolver(Arc::new(opts.net.guard()));
        for e in p.endpoint.iter().cloned().chain(env_endpoints()) {
            opts.net.check_url(uri, &e)?;
        }
        let mut role = None;
        let mut azure_identity = None;
        // The endpoint requests go to, as the builders below pick it.
        let endpoint: String;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match scheme {
            "azure" => {
                let (container, prefix) = match p.path.split_once('/') {
                    Some((c, rest)) => (c.to_string(), rest.to_string()),
                    None => (p.path.clone(), String::new()),
                };
                if container.is_empty() {
                    return Err(invalid(
                        "names no container; use azure://ACCOUNT/CONTAINER/PREFIX".into(),
                    ));
                }
                let emulator = std::env::var("AZURITE_BLOB_STORAGE_URL").ok();
                endpoint = format!(
                    "{}/{container}",
                    (p.endpoint.clone().or(emulator)).unwrap_or_else(|| format!(
                        "https://{}.blob.core.windows.net",
                        p.authority
                    ))
                );
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_account(&p.authority)
                    .with_container_name(container)
                    .with_client_options(client_options.clone())
                    .with_retry(retry());
                if std::env::var_os("AZURITE_BLOB_STORAGE_URL").is_some() {
                    b = b.with_use_emulator(true);
                }
                if let Some(e) = &p.endpoint {
                    b = b
                        .with_endpoint(e.clone())
                        .with_allow_http(e.starts_with("http://"));
                }
                if let Some(key) = &opts.secret {
                    b = b.with_access_key(key.trim());
                } else if let Some(id) = azure_workload_identity(&b)? {
                    // An IP literal resolves nothing: checked here (names
                    // by the resolver).
                    opts.net.check_url(uri, &id.authority_host)?;
                    if id.authority_host.starts_with("http://") {
                        b = b.with_allow_http(true);
                    }
                    b = b
                        .with_federated_token_file(&id.token_file)
                        .with_client_id(&id.client_id)
                        .with_tenant_id(&id.tenant_id)
                        .with_authority_host(&id.authority_host);
                    azure_identity = Some(id);
                }
                (Arc::new(b.build().map_err(built)?), prefix)
            }
            _ => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&p.authority)
                    .with_client_options(client_options.clone())
                    .with_retry(retry());
                let default_endpoint = match scheme {
                    "r2" => Some(match std::env::var("R2_ACCOUNT_ID") {
                        Ok(a) => format!("https://{a}.r2.cloudflarestorage.com"),
                        Err(_) if p.endpoint.is_some() => String::new(),
                        Err(_) => {
                            return Err(invalid(
                                "r2:// needs R2_ACCOUNT_ID on the registry host or ?endpoint="
                                    .into(),
                            ))
                        }
                    }),
                    "cw" => Some("https://cwobject.com".to_string()),
                    _ => None,
                };
                if scheme == "r2" {
                    b = b.with_region("auto");
                } else if std::env::var_os("AWS_REGION").is_none()
                    && std::env::var_os("AWS_DEFAULT_REGION").is_none()
                {
                    b = b.with_region("us-east-1");
                }
                let from_env = std::env::var("AWS_ENDPOINT_URL").or(std::env::var("AWS_ENDPOINT"));
                endpoint = (p.endpoint.clone().or(default_endpoint.clone()))
                    .or(from_env.ok())
                    .unwrap_or_else(|| "aws".into());
                if let Some(e) = p.endpoint.clone().or(default_endpoint) {
                    b = b
                        .with_endpoint(&e)
                        .with_allow_http(e.starts_with("http://"));
                }
                if let Ok(e) = std::env::var("AWS_ENDPOINT_URL").or(std::env::var("AWS_ENDPOINT")) {
                    if e.starts_with("http://") {
                        b = b.with_allow_http(true);
                    }
                }
                if let Some(r) = &p.region {
                    b = b.with_region(r);
                }
                if let Some(secret) = &opts.secret {
                    let (id, key) = secret.trim().split_once(':').ok_or_else(|| {
                        invalid("the secret must be ACCESS_KEY_ID:SECRET_ACCESS_KEY".into())
                    })?;
                    b = b
                        .with_access_key_id(id)
                        .with_secret_access_key(key)
                        .with_skip_signature(false);
                } else if let Some(provider) = workload_identity()? {
                    role = Some(provider.role_arn().to_string());
                    b = b.with_credentials(provider);
                }
                (Arc::new(b.build().map_err(built)?), p.path.clone())
            }
        };
        let prefix = if prefix.is_empty() {
            None
        } else {
            Some(StorePath::parse(&prefix).map_err(|e| invalid(e.to_string()))?)
        };
        Ok(StoreSource {
            uri: uri.to_string(),
            store,
            prefix,
            etag_is_md5: scheme != "azure" && p.verify_checksums,
            role,
            azure_identity,
            scope: p
                .verify_checksums
                .then(|| format!("{scheme}://{}@{endpoint}", p.authority)),
        })
    }

    async fn exists(&self, path: &StorePath) -> Result<bool, SyncError> {
        match self.store.head(path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.classify(path.as_ref(), e)),
        }
    }

    fn classify(&self, what: &str, e: object_store::Error) -> SyncError {
        if let Some(id) = &self.azure_identity {
            if let Some(err) = id.token_error(&self.uri, what, &e) {
                if refused_in(&e).is_none() {
                    return err;
                }
            }
            let err = classify(&self.uri, what, e);
            if err.kind != ErrorKind::Denied {
                return err;
            }
            // The exchange worked: the account refuses the application.
            return SyncError::new(
                ErrorKind::Denied,
                format!(
                    "{}: {what}: access denied to {}; check its role assignment on the container (Storage Blob Data Reader)",
                    self.uri,
                    id.name()
                ),
            );
        }
        let from_provider = credentials_cause(&e).is_some();
        match (classify(&self.uri, what, e), &self.role) {
            // The store refused the role's credentials: its policy, not
            // the exchange, is what to check.
            (e, Some(role)) if e.kind == ErrorKind::Denied && !from_provider => SyncError::new(
                ErrorKind::Denied,
                format!(
                    "{}: {what}: access denied to role {role} (workload identity); check that its policy allows s3:ListBucket and s3:GetObject on the bucket",
                    self.uri
                ),
            ),
            (e, _) => e,
        }
    }
}

/// The workload-identity provider for a job with no secret: the one the
/// registry's environment configures, unless the environment also holds
/// static keys (`AWS_ACCESS_KEY_ID`), which come first in the AWS SDKs'
/// order and in `object_store`'s.
fn workload_identity() -> Result<Option<Arc<crate::aws_identity::WebIdentityProvider>>, SyncError> {
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
        return Ok(None);
    }
    crate::aws_identity::from_env_once()
}

/// Azure workload identity for a job with no secret, when the registry's
/// environment configures it and `b` (the builder `from_env` made) holds
/// no credential that `object_store` would take first (an account key, a
/// bearer token), nor points at the emulator, which takes only its key.
fn azure_workload_identity(
    b: &object_store::azure::MicrosoftAzureBuilder,
) -> Result<Option<AzureIdentity>, SyncError> {
    use object_store::azure::AzureConfigKey as K;
    if [K::AccessKey, K::Token, K::SasKey]
        .iter()
        .any(|k| b.get_config_value(k).is_some())
        || std::env::var_os("AZURITE_BLOB_STORAGE_URL").is_some()
    {
        return Ok(None);
    }
    AzureIdentity::from_vars(|k| std::env::var(k).ok())
}

/// The error a credential provider of ours failed with, when `e` is one:
/// it already says what it means for the job.
fn credentials_cause(e: &object_store::Error) -> Option<&SyncError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(s) = c.downcast_ref::<SyncError>() {
            return Some(s);
        }
        cause = c.source();
    }
    None
}

/// What an `object_store` error means for the job. Statuses inside a
/// generic error are read from its text: `object_store` keeps the error
/// type that holds them private. Without a status, a generic error is transient only
/// when it is a transport failure (a connection refused or reset, a
/// timeout); one from getting credentials is `SOURCE_DENIED` (ours, from
/// [`crate::aws_identity`], say their own kind); anything
/// else (a malformed answer, a bad configuration) `INVALID_SOURCE`, since
/// retrying would not change it.
pub(crate) fn classify(uri: &str, what: &str, e: object_store::Error) -> SyncError {
    use object_store::Error as E;
    if let Some(why) = refused_in(&e) {
        return SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {what}: {why}"));
    }
    if let Some(cause) = credentials_cause(&e) {
        return SyncError::new(cause.kind, format!("{uri}: {what}: {}", cause.message));
    }
    let kind = match &e {
        E::NotFound { .. } => ErrorKind::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorKind::Denied,
        E::Precondition { .. } => ErrorKind::Changed,
        E::InvalidPath { .. } | E::NotSupported { .. } => ErrorKind::InvalidSource,
        _ => match status_in(&format!("{e:?}")) {
            Some(s) => SyncError::from_status(s, String::new()).kind,
            None if is_credentials_error(&e) => ErrorKind::Denied,
            None if is_transport_error(&e) => ErrorKind::Transient,
            None => ErrorKind::InvalidSource,
        },
    };
    let detail = match kind {
        ErrorKind::NotFound => "not found (does the bucket or container exist?)".to_string(),
        ErrorKind::Denied if is_credentials_error(&e) => format!(
            "no credentials ({}); set a secret or give the registry's host credentials",
            first_line(&error_chain(&e))
        ),
        ErrorKind::Denied => {
            "access denied; check the secret or the registry's credentials".to_string()
        }
        _ => first_line(&error_chain(&e)),
    };
    SyncError::new(kind, format!("{uri}: {what}: {detail}"))
}

/// Words of a transport failure in an error's text (any of its causes):
/// what reqwest, hyper and the OS say of a connection that could not be
/// made or broke, or a request that timed out.
const TRANSPORT_WORDS: &[&str] = &[
    "connect",
    "timeout",
    "timed out",
    "reset",
    "broken pipe",
    "error sending request",
    "incomplete message",
    "unexpected eof",
];

/// Whether `e` is a request that got no (whole) answer: `object_store`'s
/// own transport kinds, or the words of one in its text.
fn is_transport_error(e: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<HttpError>() {
            if matches!(
                h.kind(),
                HttpErrorKind::Connect
                    | HttpErrorKind::Request
                    | HttpErrorKind::Timeout
                    | HttpErrorKind::Interrupted
            ) {
                return true;
            }
        }
        cause = c.source();
    }
    let text = plain_text(e);
    TRANSPORT_WORDS.iter().any(|w| text.contains(w))
}

/// Whether `e` came from getting credentials (the instance metadata
/// service, a token exchange, a malformed key), not from the object store.
fn is_credentials_error(e: &object_store::Error) -> bool {
    let text = plain_text(e);
    // The instance metadata service is known by its address.
    error_chain(e).contains("//169.254.169.254/")
        || ["credential", "token request", "access key"]
            .iter()
            .any(|w| text.contains(w))
}

/// An error's text with its causes, lower case, without the URLs
/// `object_store` puts in it (a key named `reset/connect.bin` says nothing
/// of the failure) or its retry settings (`retry_timeout`).
fn plain_text(e: &object_store::Error) -> String {
    error_chain(e)
        .split_whitespace()
        .filter(|w| !w.contains("://"))
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase()
        .replace("retry_timeout", "")
}

fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status: ")? + "status: ".len();
    text.get(at..at + 3)?.parse().ok()
}

#[async_trait]
impl Source for StoreSource {
    fn uri(&self) -> &str {
        &self.uri
    }

    async fn list(&self) -> Result<Vec<Object>, SyncError> {
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(self.prefix.as_ref())
            .map_err(|e| self.classify("listing", e))
            .try_collect()
            .await?;
        let base = self.prefix.as_ref().map(|p| format!("{}/", p.as_ref()));
        let mut out = Vec::with_capacity(metas.len());
        for m in &metas {
            let key = m.location.as_ref().to_string();
            // `object_store` drops the trailing `/` of a folder marker
            // (`ckpt/`, as consoles and `aws s3api put-object` make them),
            // so a marker lists as an empty object named like its folder,
            // and that name does not exist: ask before taking it as an
            // empty file.
            if key.ends_with('/') || (m.size == 0 && !self.exists(&m.location).await?) {
                continue;
            }
            let rel = match &base {
                Some(b) => key.strip_prefix(b.as_str()).unwrap_or(&key),
                None => &key,
            };
            let etag = m.e_tag.as_deref().map(|t| t.trim_matches('"').to_string());
            let checksum = etag
                .as_deref()
                .filter(|_| self.etag_is_md5)
                .filter(|t| t.len() == 32)
                .and_then(|t| hex::decode(t).ok())
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(Checksum::Md5);
            // An ETag changes whenever the object is written with other
            // bytes (an MD5, a multipart digest, or a fresh value per
            // write); the key and size bind it to this object.
            let identity = etag
                .as_deref()
                .filter(|_| self.scope.is_some())
                .map(|t| serde_json::json!(["etag", t, m.size, key]).to_string());
            out.push(Object {
                path: tree_path(&self.uri, &key, rel)?,
                key,
                size: m.size,
                mismatch_hint: checksum.map(|_| ETAG_HINT),
                checksum,
                identity,
                version: etag,
                mode: crate::FILE_MODE,
            });
        }
        Ok(out)
    }

    fn reuse_scope(&self) -> Option<String> {
        self.scope.clone()
    }

    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError> {
        // Nothing to read; and an empty marker of a folder with no other
        // key could not be read under the name `object_store` gives it.
        if object.size == 0 {
            return Ok(futures_util::stream::empty().boxed());
        }
        let path = StorePath::from(object.key.as_str());
        let opts = GetOptions {
            if_match: object.version.as_ref().map(|v| format!("\"{v}\"")),
            ..Default::default()
        };
        let got = self.store.get_opts(&path, opts).await.map_err(|e| {
            match self.classify(&object.key, e) {
                // Listed a moment ago: gone or changed since.
                e if e.kind == ErrorKind::NotFound => SyncError::new(ErrorKind::Changed, e.message),
                e => e,
            }
        })?;
        let uri = self.uri.clone();
        let key = object.key.clone();
        Ok(got
            .into_stream()
            .map_err(move |e| classify(&uri, &key, e))
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_with_options() {
        let p =
            parse_uri("s3://bkt/a/b%20c/?endpoint=http://127.0.0.1:9000&region=eu-west-1").unwrap();
        assert_eq!(p.authority, "bkt");
        assert_eq!(p.path, "a/b c");
        assert_eq!(p.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(p.region.as_deref(), Some("eu-west-1"));
        assert!(p.verify_checksums);
        assert!(parse_uri("s3:///x").is_err());
        assert!(parse_uri("s3://b/x?color=red").is_err());
    }

    #[test]
    fn checksum_none_turns_the_checksums_off() {
        for uri in [
            "s3://bkt/p?checksum=none",
            "r2://bkt/p?endpoint=http://127.0.0.1:9000&checksum=none",
            "gs://bkt/p?checksum=none&region=x",
        ] {
            let p = parse_uri(uri).unwrap();
            assert!(!p.verify_checksums, "{uri}");
            assert_eq!(p.path, "p", "{uri}");
        }
        for bad in ["s3://bkt/p?checksum=md5", "s3://bkt/p?checksum="] {
            let e = parse_uri(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{bad}");
            assert!(e.message.contains("checksum="), "{}", e.message);
        }
        let e = parse_uri("s3://bkt/p?checksums=none").unwrap_err();
        assert!(e.message.contains("checksum=none"), "{}", e.message);
    }

    #[test]
    fn literal_endpoints_are_checked_before_any_request() {
        for (uri, net) in [
            (
                "s3://b?endpoint=http://169.254.169.254",
                crate::NetPolicy::local(),
            ),
            (
                "s3://b?endpoint=http://[fd00:ec2::254]",
                crate::NetPolicy::local(),
            ),
            (
                "azure://acct/c?endpoint=http://127.0.0.1:10000",
                crate::NetPolicy::default(),
            ),
        ] {
            let opts = SourceOptions {
                net,
                ..Default::default()
            };
            let e = StoreSource::new(uri, &opts).err().expect(uri);
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{uri}");
            assert!(e.message.contains("sync"), "{}", e.message);
        }
    }

    #[test]
    fn s3_etags_are_checked_unless_checksum_none() {
        let local = SourceOptions {
            net: crate::NetPolicy::local(),
            ..Default::default()
        };
        let s3 = StoreSource::new(
            "s3://bkt/p?endpoint=http://127.0.0.1:9&region=us-east-1",
            &local,
        )
        .unwrap();
        assert!(s3.etag_is_md5);
        let off = StoreSource::new(
            "s3://bkt/p?endpoint=http://127.0.0.1:9&region=us-east-1&checksum=none",
            &local,
        )
        .unwrap();
        assert!(!off.etag_is_md5);
    }

    #[test]
    fn errors_without_a_status_are_transient_only_for_transport_failures() {
        use object_store::client::{HttpError, HttpErrorKind};
        let generic = |source: Box<dyn std::error::Error + Send + Sync>| {
            classify(
                "s3://b/p",
                "k",
                object_store::Error::Generic {
                    store: "S3",
                    source,
                },
            )
        };
        let io = |kind, text: &str| Box::new(std::io::Error::new(kind, text.to_string()));
        let http = |kind| {
            generic(Box::new(HttpError::new(
                kind,
                std::io::Error::other("something broke"),
            )))
        };
        assert_eq!(http(HttpErrorKind::Connect).kind, ErrorKind::Transient);
        assert_eq!(http(HttpErrorKind::Timeout).kind, ErrorKind::Transient);
        assert_eq!(http(HttpErrorKind::Interrupted).kind, ErrorKind::Transient);
        assert_eq!(http(HttpErrorKind::Decode).kind, ErrorKind::InvalidSource);
        assert_eq!(
            generic(io(std::io::ErrorKind::Other, "Connection reset by peer")).kind,
            ErrorKind::Transient
        );
        assert_eq!(
            generic(io(std::io::ErrorKind::Other, "error sending request")).kind,
            ErrorKind::Transient
        );
        let e = generic(io(
            std::io::ErrorKind::Other,
            "Status { status: 503, body: None }",
        ));
        assert_eq!(e.kind, ErrorKind::Transient);
        let e = generic(io(
            std::io::ErrorKind::Other,
            "Status { status: 429, body: None }",
        ));
        assert_eq!(e.kind, ErrorKind::Transient);
        let e = generic(io(
            std::io::ErrorKind::Other,
            "Status { status: 400, body: None }",
        ));
        assert_eq!(e.kind, ErrorKind::InvalidSource);
        let e = generic(io(
            std::io::ErrorKind::Other,
            "Error parsing XML response: missing field `Key`\nline two",
        ));
        assert_eq!(e.kind, ErrorKind::InvalidSource);
        assert!(!e.message.contains('\n'), "{}", e.message);
        // Words in a URL are not the failure's.
        let e = generic(io(
            std::io::ErrorKind::Other,
            "Error performing GET http://h/b/reset/connect-timeout.bin in 0ms, retry_timeout: 20s - bad XML",
        ));
        assert_eq!(e.kind, ErrorKind::InvalidSource, "{}", e.message);
        let e = generic(io(
            std::io::ErrorKind::Other,
            "Failed to load credentials: no access key found",
        ));
        assert_eq!(e.kind, ErrorKind::Denied);
        assert!(e.message.contains("no credentials"), "{}", e.message);
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn azure_workload_identity_comes_from_the_sdk_variables() {
        let all = [
            (
                "AZURE_FEDERATED_TOKEN_FILE",
                "/var/run/secrets/azure/tokens/azure-identity-token",
            ),
            ("AZURE_CLIENT_ID", "client-1"),
            ("AZURE_TENANT_ID", "tenant-1"),
        ];
        for missing in 0..all.len() {
            let some: Vec<_> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != missing)
                .map(|(_, p)| *p)
                .collect();
            assert_eq!(AzureIdentity::from_vars(vars(&some)).unwrap(), None);
        }
        let id = AzureIdentity::from_vars(vars(&all)).unwrap().unwrap();
        assert_eq!(id.authority_host, "https://login.microsoftonline.com");
        assert_eq!(id.client_id, "client-1");
        // The AKS webhook's trailing `/` is dropped: object_store appends
        // `/TENANT/oauth2/v2.0/token`.
        let mut with = all.to_vec();
        with.push(("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.us/"));
        let id = AzureIdentity::from_vars(vars(&with)).unwrap().unwrap();
        assert_eq!(id.authority_host, "https://login.microsoftonline.us");
        for (host, ok) in [
            ("http://127.0.0.1:9/", true),
            ("http://localhost:9", true),
            ("http://login.example.com", false),
            ("login.microsoftonline.com", false),
        ] {
            let mut with = all.to_vec();
            with.push(("AZURE_AUTHORITY_HOST", host));
            let got = AzureIdentity::from_vars(vars(&with));
            assert_eq!(got.is_ok(), ok, "{host}");
            if let Err(e) = got {
                assert_eq!(e.kind, ErrorKind::InvalidSource);
                assert!(e.message.contains("AZURE_AUTHORITY_HOST"), "{}", e.message);
            }
        }
    }

    #[test]
    fn azure_token_errors_are_denied_or_retried_and_name_the_client() {
        let id = AzureIdentity {
            token_file: "/t".into(),
            client_id: "client-1".into(),
            tenant_id: "tenant-1".into(),
            authority_host: "https://login.microsoftonline.com".into(),
        };
        let generic = |text: &str| object_store::Error::Generic {
            store: "MicrosoftAzure",
            source: Box::new(std::io::Error::other(text.to_string())),
        };
        let assertion = "eyJhbGciOiJSUzI1NiJ9.assertion.sig";
        let e = id
            .token_error(
                "azure://a/c",
                "listing",
                &generic(&format!("Error performing token request: Error performing POST https://login.microsoftonline.com/tenant-1/oauth2/v2.0/token in 1ms - Status {{ status: 400, body: Some(\"bad assertion {assertion}\") }}")),
            )
            .unwrap();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(
            e.message.contains("client-1") && e.message.contains("tenant-1"),
            "{}",
            e.message
        );
        assert!(e.message.contains("HTTP 400"), "{}", e.message);
        assert!(!e.message.contains(assertion), "{}", e.message);
        let e = id
            .token_error(
                "azure://a/c",
                "listing",
                &generic("Error performing token request: Status { status: 503, body: None }"),
            )
            .unwrap();
        assert_eq!(e.kind, ErrorKind::Transient, "{}", e.message);
        let e = id
            .token_error(
                "azure://a/c",
                "listing",
                &generic(
                    "Error performing token request: error sending request: connection refused",
                ),
            )
            .unwrap();
        assert_eq!(e.kind, ErrorKind::Transient, "{}", e.message);
        let e = id
            .token_error(
                "azure://a/c",
                "listing",
                &generic("Error reading federated token file "),
            )
            .unwrap();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(
            e.message.contains("AZURE_FEDERATED_TOKEN_FILE"),
            "{}",
            e.message
        );
        // Not a token error: the caller decides.
        assert!(id
            .token_error(
                "azure://a/c",
                "listing",
                &generic("Status { status: 403, body: None }")
            )
            .is_none());
    }

    #[test]
    fn statuses_are_read_from_error_text() {
        assert_eq!(status_in("Status { status: 404, body: None }"), Some(404));
        assert_eq!(status_in("no status here"), None);
    }
}
