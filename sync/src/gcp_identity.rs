//! Workload identity for `gs://` sources (SPEC.md §8.1): Google's
//! external-account credentials. `GOOGLE_APPLICATION_CREDENTIALS` names a
//! JSON file of `"type": "external_account"` whose subject token is read
//! from a file (a Kubernetes projected service-account token); the
//! registry exchanges it at the file's `token_url` (Google STS, an RFC 8693
//! token exchange) for an access token, and, when the file names a
//! `service_account_impersonation_url`, exchanges that for a token of the
//! service account (IAM Credentials `generateAccessToken`).
//!
//! [`from_env_once`] reads the file once and keeps one
//! [`ExternalAccountProvider`] for the process: concurrent jobs share one
//! exchange, and the token is exchanged again before it expires (on the
//! schedule of [`crate::aws_identity::refresh_after`]), reading the
//! subject token file anew each time (the platform rotates it).
//!
//! Not here: the other credential types Google's libraries read
//! (`authorized_user`, `service_account` keys, `external_account` with a
//! `credential_source` of `url`, `executable` or an AWS
//! `environment_id`). [`HostCredentials::Unsupported`] names them, so a
//! refused anonymous request can say they are not used. Nor when a job
//! uses this (that is [`crate::gcs`]'s decision: only without a secret).
//!
//! Why not the `gcp_auth` or `google-cloud-auth` crates: they take no
//! HTTP client from us, so the token endpoints could not be held to the
//! addresses a sync may connect to (SPEC.md §8.4), and nothing in them
//! bounds what an endpoint answers. The endpoints come from the admin's
//! file, not a job's URI, but the rules of §8.4 still apply to them: the
//! exchange goes through the job's [`NetPolicy`] (link-local and metadata
//! addresses refused, loopback only on a registry that may reach it), and
//! plain HTTP only to a loopback address.
//!
//! The subject token and the access tokens are credentials: they go only
//! into request bodies and `Authorization` headers, never into a message,
//! a log line or a URL; an endpoint that echoes one has it replaced.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::aws_identity::refresh_after;
use crate::http::{error_chain, first_line};
use crate::net::{refused_in, NetPolicy};
use crate::{ErrorKind, SyncError};

/// The longest an exchange may take before the request that waits on it
/// fails (and the job retries it).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after a failed refresh the next is tried, while the current
/// token still serves.
const RETRY_REFRESH: Duration = Duration::from_secs(30);
/// Most bytes read of a token endpoint's answer: a token answer is a few
/// KiB; a server sending more is not a token endpoint.
const ANSWER_CAP: usize = 64 << 10;
/// Most bytes read of the credentials file and of the subject token file.
const FILE_CAP: u64 = 1 << 20;
/// What the STS token may do: Google's libraries ask for this scope, and
/// STS documents it as the default.
const STS_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// What the service account's token may do: the registry only reads.
const READ_SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_only";
/// How long a token of an STS answer without `expires_in` is taken to
/// live: short, so it is exchanged again soon rather than used stale.
const UNKNOWN_LIFETIME: Duration = Duration::from_secs(600);
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// How the subject token file holds the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectFormat {
    /// The whole file (trimmed).
    Text,
    /// A JSON object; the token is the string in this field.
    Json { field: String },
}

/// An `external_account` credentials file with a `file` credential
/// source: everything needed to exchange, read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalAccount {
    /// The credentials file (`GOOGLE_APPLICATION_CREDENTIALS`), for messages.
    pub credentials_file: PathBuf,
    /// The workload identity pool provider (`audience`).
    pub audience: String,
    pub subject_token_type: String,
    /// Google STS (`token_url`).
    pub token_url: String,
    /// IAM Credentials `generateAccessToken` of the service account to
    /// impersonate, if any.
    pub impersonation_url: Option<String>,
    /// That service account's email, from the URL.
    pub service_account: Option<String>,
    /// Lifetime asked for the service account's token, in seconds.
    pub impersonation_lifetime: u64,
    /// The file holding the subject token (`credential_source.file`).
    pub subject_file: PathBuf,
    pub format: SubjectFormat,
}

/// What `GOOGLE_APPLICATION_CREDENTIALS` holds, for a `gs://` job without
/// a secret.
#[derive(Clone, Debug)]
pub enum HostCredentials {
    /// The variable is not set: requests are anonymous.
    None,
    /// Workload identity: tokens come from this provider.
    External(Arc<ExternalAccountProvider>),
    /// Credentials this registry does not use (requests are anonymous);
    /// what they are, for a refusal's message: `authorized_user`,
    /// `external_account with credential_source.url`, `unreadable (…)`.
    Unsupported(String),
}

/// The raw file, as Google documents it; unknown fields are ignored.
#[derive(Deserialize)]
struct RawFile {
    r#type: String,
    audience: Option<String>,
    subject_token_type: Option<String>,
    token_url: Option<String>,
    service_account_impersonation_url: Option<String>,
    service_account_impersonation: Option<RawImpersonation>,
    credential_source: Option<RawSource>,
}

#[derive(Deserialize)]
struct RawImpersonation {
    token_lifetime_seconds: Option<u64>,
}

#[derive(Deserialize)]
struct RawSource {
    file: Option<String>,
    url: Option<String>,
    executable: Option<serde_json::Value>,
    environment_id: Option<String>,
    format: Option<RawFormat>,
}

#[derive(Deserialize)]
struct RawFormat {
    r#type: Option<String>,
    subject_token_field_name: Option<String>,
}

/// What a credentials file means: workload identity this module
/// supports, or a description of what it is instead.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    External(ExternalAccount),
    Unsupported(String),
}

impl ExternalAccount {
    /// Reads the credentials file `file`. A file of another type (or an
    /// `external_account` whose token comes from elsewhere than a file) is
    /// [`Parsed::Unsupported`]; an `external_account` with a file source
    /// that could never work (no audience, a token URL that is not https)
    /// is an error: the admin meant it to be used.
    pub fn parse(file: &Path, json: &[u8]) -> Result<Parsed, SyncError> {
        let raw: RawFile = match serde_json::from_slice(json) {
            Ok(r) => r,
            // No `e` in the text: serde's message quotes the input.
            Err(e) => {
                return Ok(Parsed::Unsupported(format!(
                    "unreadable: not a credentials JSON at line {} column {}",
                    e.line(),
                    e.column()
                )))
            }
        };
        if raw.r#type != "external_account" {
            return Ok(Parsed::Unsupported(raw.r#type));
        }
        let source = raw.credential_source.unwrap_or(RawSource {
            file: None,
            url: None,
            executable: None,
            environment_id: None,
            format: None,
        });
        let subject_file = match (&source.file, &source.url, &source.executable) {
            (Some(f), _, _) if !f.trim().is_empty() => PathBuf::from(f.trim()),
            (_, Some(_), _) => return Ok(unsupported_source("url")),
            (_, _, Some(_)) => return Ok(unsupported_source("executable")),
            _ if source.environment_id.is_some() => {
                return Ok(unsupported_source("environment_id (AWS)"))
            }
            _ => return Ok(unsupported_source("of no kind")),
        };
        let invalid = |why: String| {
            SyncError::new(
                ErrorKind::InvalidSource,
                format!(
                    "workload identity: the credentials file {} (GOOGLE_APPLICATION_CREDENTIALS) {why}",
                    file.display()
                ),
            )
        };
        let format =
            match source.format {
                None => SubjectFormat::Text,
                Some(f) => match f.r#type.as_deref().unwrap_or("text") {
                    "text" => SubjectFormat::Text,
                    "json" => match f.subject_token_field_name.filter(|n| !n.is_empty()) {
                        Some(field) => SubjectFormat::Json { field },
                        None => return Err(invalid(
                            "has credential_source.format json without subject_token_field_name"
                                .into(),
                        )),
                    },
                    other => {
                        return Err(invalid(format!(
                            "has credential_source.format type {other:?}; use text or json"
                        )))
                    }
                },
            };
        let required = |v: Option<String>, name: &str| {
            v.map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| invalid(format!("has no {name}")))
        };
        let audience = required(raw.audience, "audience")?;
        let subject_token_type = required(raw.subject_token_type, "subject_token_type")?;
        let token_url = required(raw.token_url, "token_url")?;
        check_endpoint(&token_url).map_err(|why| invalid(format!("has token_url {why}")))?;
        let impersonation_url = raw
            .service_account_impersonation_url
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty());
        let service_account = match &impersonation_url {
            Some(u) => {
                check_endpoint(u).map_err(|why| {
                    invalid(format!("has service_account_impersonation_url {why}"))
                })?;
                Some(service_account_of(u).ok_or_else(|| {
                    invalid(format!(
                        "has service_account_impersonation_url {u:?}, which names no service account (…/serviceAccounts/EMAIL:generateAccessToken)"
                    ))
                })?)
            }
            None => None,
        };
        let impersonation_lifetime = raw
            .service_account_impersonation
            .and_then(|i| i.token_lifetime_seconds)
            .unwrap_or(3600);
        if !(600..=43_200).contains(&impersonation_lifetime) {
            return Err(invalid(format!(
                "asks for a token lifetime of {impersonation_lifetime} s; Google allows 600 to 43200"
            )));
        }
        Ok(Parsed::External(ExternalAccount {
            credentials_file: file.to_path_buf(),
            audience,
            subject_token_type,
            token_url,
            impersonation_url,
            service_account,
            impersonation_lifetime,
            subject_file,
            format,
        }))
    }

    /// Who the tokens speak for, for messages: the service account when
    /// one is impersonated, else the pool provider; and the file.
    pub fn identity(&self) -> String {
        let file = self.credentials_file.display();
        match &self.service_account {
            Some(sa) => format!("service account {sa} ({file})"),
            None => format!("external account {} ({file})", self.audience),
        }
    }
}

fn unsupported_source(kind: &str) -> Parsed {
    Parsed::Unsupported(format!("external_account with credential_source {kind}"))
}

/// Why a token endpoint URL cannot be used, if it cannot: not an http(s)
/// URL, or plain HTTP to another host than loopback (the token would
/// cross the network in clear text).
fn check_endpoint(raw: &str) -> Result<(), String> {
    let url = url::Url::parse(raw).map_err(|e| format!("{raw:?}, which is not a URL ({e})"))?;
    let loopback = url
        .host_str()
        .is_some_and(sealvol_spec::reference::is_loopback_host);
    match url.scheme() {
        "https" if url.host_str().is_some() => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(format!(
            "{raw}, which must be https:// (plain http:// only to a loopback address)"
        )),
    }
}

/// The email in `…/serviceAccounts/EMAIL:generateAccessToken`.
fn service_account_of(url: &str) -> Option<String> {
    let path = url::Url::parse(url).ok()?.path().to_string();
    let rest = path.split("/serviceAccounts/").nth(1)?;
    let email = rest.strip_suffix(":generateAccessToken")?;
    let email = percent_encoding::percent_decode_str(email)
        .decode_utf8()
        .ok()?
        .into_owned();
    (!email.is_empty() && !email.contains('/')).then_some(email)
}

/// What the registry process's environment says, read on first use and
/// kept: one provider, so that concurrent jobs make one exchange. An
/// `Err` (a broken `external_account` file) fails every `gs://` job
/// without a secret, with the same message.
pub fn from_env_once() -> Result<HostCredentials, SyncError> {
    static AMBIENT: OnceLock<Result<HostCredentials, SyncError>> = OnceLock::new();
    AMBIENT
        .get_or_init(|| {
            let Some(file) =
                std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").filter(|f| !f.is_empty())
            else {
                return Ok(HostCredentials::None);
            };
            let file = PathBuf::from(file);
            let bytes = match read_capped(&file) {
                Ok(b) => b,
                Err(e) => return Ok(HostCredentials::Unsupported(format!("unreadable: {e}"))),
            };
            Ok(match ExternalAccount::parse(&file, &bytes)? {
                Parsed::External(account) => {
                    HostCredentials::External(Arc::new(ExternalAccountProvider::new(account)))
                }
                Parsed::Unsupported(kind) => HostCredentials::Unsupported(kind),
            })
        })
        .clone()
}

/// A file's bytes, refused beyond [`FILE_CAP`]: the files are the host's
/// and small, and a mistaken path (a device, a log) must not fill memory.
fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(FILE_CAP + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > FILE_CAP {
        return Err(std::io::Error::other(format!(
            "larger than {} KiB",
            FILE_CAP >> 10
        )));
    }
    Ok(out)
}

/// Access tokens of the external account, exchanged for the subject token
/// and kept until shortly before they expire.
pub struct ExternalAccountProvider {
    account: ExternalAccount,
    /// Held across an exchange, so that requests arriving meanwhile wait
    /// for its result instead of each making their own.
    cache: tokio::sync::Mutex<Option<Cached>>,
}

struct Cached {
    token: Arc<str>,
    /// When to exchange again.
    refresh_at: Instant,
    /// When the token stops working.
    expires_at: Instant,
}

impl std::fmt::Debug for ExternalAccountProvider {
    // No token: only the settings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalAccountProvider")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// Google STS's answer (RFC 8693 §2.2.1).
#[derive(Deserialize)]
struct StsAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

/// IAM Credentials' `generateAccessToken` answer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImpersonationAnswer {
    access_token: String,
    /// RFC 3339, UTC.
    expire_time: String,
}

/// The parts of an error answer worth repeating: an OAuth error code
/// (STS) or a Google API status word, and the description.
fn error_reason(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    let text = |v: Option<&serde_json::Value>| v.and_then(|s| s.as_str()).unwrap_or("").to_string();
    let (code, description) = match v.get("error") {
        // STS: {"error":"invalid_grant","error_description":"…"}.
        Some(serde_json::Value::String(code)) => (code.clone(), text(v.get("error_description"))),
        // Google APIs: {"error":{"code":403,"message":"…","status":"PERMISSION_DENIED"}}.
        Some(e) => (text(e.get("status")), text(e.get("message"))),
        None => return String::new(),
    };
    // A code is a word; anything else is not repeated.
    let code = if code.len() <= 64 && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        code
    } else {
        String::new()
    };
    let description: String = first_line(&description).chars().take(200).collect();
    match (code.is_empty(), description.is_empty()) {
        (false, false) => format!("{code}: {description}"),
        (false, true) => code,
        (true, false) => description,
        (true, true) => String::new(),
    }
}

impl ExternalAccountProvider {
    pub fn new(account: ExternalAccount) -> ExternalAccountProvider {
        ExternalAccountProvider {
            account,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    pub fn account(&self) -> &ExternalAccount {
        &self.account
    }

    /// An access token: the kept one until its refresh time, else a new
    /// one, its exchange made through clients that `net` governs. When a
    /// refresh fails while the kept token outlives the next try, that one
    /// is used and the refresh tried again `RETRY_REFRESH` (30 s) later.
    pub async fn token(&self, net: &NetPolicy) -> Result<Arc<str>, SyncError> {
        let mut cache = self.cache.lock().await;
        let now = Instant::now();
        if let Some(c) = cache.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(Arc::clone(&c.token));
        }
        match self.exchange(net).await {
            Ok((token, lifetime)) => {
                let token: Arc<str> = Arc::from(token);
                tracing::debug!(
                    identity = %self.account.identity(),
                    lifetime = ?lifetime,
                    "external account exchanged for an access token"
                );
                *cache = Some(Cached {
                    token: Arc::clone(&token),
                    refresh_at: now + refresh_after(lifetime),
                    expires_at: now + lifetime,
                });
                Ok(token)
            }
            Err(e) => match cache.as_mut() {
                Some(c) if now + RETRY_REFRESH < c.expires_at => {
                    tracing::warn!(error = %e.message, "workload identity refresh failed; the current token still serves");
                    // Not again on every request meanwhile: each would
                    // wait for the exchange while STS is down.
                    c.refresh_at = now + RETRY_REFRESH;
                    Ok(Arc::clone(&c.token))
                }
                _ => Err(e),
            },
        }
    }

    fn fail(&self, kind: ErrorKind, why: String) -> SyncError {
        SyncError::new(
            kind,
            format!("workload identity as {}: {why}", self.account.identity()),
        )
    }

    /// The subject token as its file holds it now.
    async fn subject_token(&self) -> Result<String, SyncError> {
        let a = &self.account;
        let path = a.subject_file.clone();
        let bytes = tokio::task::spawn_blocking(move || read_capped(&path))
            .await
            .map_err(|e| self.fail(ErrorKind::Internal, e.to_string()))?
            .map_err(|e| {
                self.fail(
                    ErrorKind::Denied,
                    format!(
                        "cannot read the subject token file {} ({e}); check credential_source.file",
                        a.subject_file.display()
                    ),
                )
            })?;
        let token = match &a.format {
            SubjectFormat::Text => String::from_utf8_lossy(&bytes).trim().to_string(),
            SubjectFormat::Json { field } => serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get(field)?.as_str().map(|s| s.trim().to_string()))
                .ok_or_else(|| {
                    // No text of the file: it is the credential.
                    self.fail(
                        ErrorKind::Denied,
                        format!(
                            "the subject token file {} is not a JSON object with a string {field:?}",
                            a.subject_file.display()
                        ),
                    )
                })?,
        };
        if token.is_empty() {
            return Err(self.fail(
                ErrorKind::Denied,
                format!(
                    "the subject token file {} is empty",
                    a.subject_file.display()
                ),
            ));
        }
        Ok(token)
    }

    /// The form sent to STS.
    fn sts_form(&self, subject_token: &str) -> String {
        let a = &self.account;
        form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", GRANT_TYPE)
            .append_pair("audience", &a.audience)
            .append_pair("scope", STS_SCOPE)
            .append_pair("requested_token_type", ACCESS_TOKEN_TYPE)
            .append_pair("subject_token_type", &a.subject_token_type)
            .append_pair("subject_token", subject_token)
            .finish()
    }

    /// One exchange with the subject token as its file holds it now: the
    /// access token to use, and how long it lives.
    async fn exchange(&self, net: &NetPolicy) -> Result<(String, Duration), SyncError> {
        let a = &self.account;
        let subject = self.subject_token().await?;
        let http = crate::http::exchange_client("workload identity", net)?;
        let sts = self
            .post(
                net,
                "STS",
                &a.token_url,
                http.post(&a.token_url)
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(self.sts_form(&subject)),
                &[&subject],
            )
            .await?;
        let answer: StsAnswer = serde_json::from_slice(&sts).map_err(|e| {
            self.fail(
                ErrorKind::InvalidSource,
                format!(
                    "STS {} answered no access token (at line {} column {})",
                    a.token_url,
                    e.line(),
                    e.column()
                ),
            )
        })?;
        let Some(url) = &a.impersonation_url else {
            let lifetime = answer
                .expires_in
                .map_or(UNKNOWN_LIFETIME, Duration::from_secs);
            return Ok((answer.access_token, lifetime));
        };
        let body = serde_json::json!({
            "scope": [READ_SCOPE],
            "lifetime": format!("{}s", a.impersonation_lifetime),
        });
        let iam = self
            .post(
                net,
                "IAM Credentials",
                url,
                http.post(url)
                    .bearer_auth(&answer.access_token)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
                &[&subject, &answer.access_token],
            )
            .await?;
        let answer: ImpersonationAnswer = serde_json::from_slice(&iam).map_err(|e| {
            self.fail(
                ErrorKind::InvalidSource,
                format!(
                    "IAM Credentials {url} answered no access token (at line {} column {})",
                    e.line(),
                    e.column()
                ),
            )
        })?;
        let expires = humantime::parse_rfc3339_weak(answer.expire_time.trim()).map_err(|e| {
            self.fail(
                ErrorKind::InvalidSource,
                format!(
                    "IAM Credentials {url} answered an unreadable expireTime {:?} ({e})",
                    answer.expire_time
                ),
            )
        })?;
        let lifetime = expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        Ok((answer.access_token, lifetime))
    }

    /// Sends `req` to `endpoint` (`what` names it) and returns the body of
    /// a 2xx answer, read up to [`ANSWER_CAP`]. Messages have every one of
    /// `secrets` replaced, whatever the endpoint echoes.
    async fn post(
        &self,
        net: &NetPolicy,
        what: &str,
        endpoint: &str,
        req: reqwest::RequestBuilder,
        secrets: &[&str],
    ) -> Result<bytes::Bytes, SyncError> {
        let scrub = |s: &str| {
            secrets
                .iter()
                .filter(|t| !t.is_empty())
                .fold(s.to_string(), |s, t| s.replace(t, "<token>"))
        };
        // An IP literal resolves nothing: checked here; names are checked
        // by the client's resolver as they resolve (SPEC.md §8.4).
        net.check_url("", endpoint).map_err(|e| {
            self.fail(
                ErrorKind::InvalidSource,
                format!("{what} {endpoint}{}", e.message),
            )
        })?;
        let transport = |e: reqwest::Error| {
            if let Some(why) = refused_in(&e) {
                return self.fail(
                    ErrorKind::InvalidSource,
                    format!("{what} {endpoint}: {why}"),
                );
            }
            let kind = if e.is_builder() {
                ErrorKind::InvalidSource
            } else {
                ErrorKind::Transient
            };
            let why = scrub(&first_line(&error_chain(&e.without_url())));
            self.fail(kind, format!("{what} {endpoint} unreachable: {why}"))
        };
        let mut resp = req
            .timeout(EXCHANGE_TIMEOUT)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status().as_u16();
        let too_large = || {
            self.fail(
                ErrorKind::InvalidSource,
                format!(
                    "{what} {endpoint}: the answer is larger than {} KiB; is it the token endpoint?",
                    ANSWER_CAP >> 10
                ),
            )
        };
        if resp.content_length().is_some_and(|n| n > ANSWER_CAP as u64)
            && (200..300).contains(&status)
        {
            return Err(too_large());
        }
        let (body, more) = crate::http::read_up_to(&mut resp, ANSWER_CAP)
            .await
            .map_err(transport)?;
        if !(200..300).contains(&status) {
            let reason = scrub(&error_reason(&body));
            let reason = if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            };
            let (kind, hint) = match status {
                408 | 429 | 500..=599 => (ErrorKind::Transient, ""),
                // Not followed: the credential would go where it points.
                300..=399 => (
                    ErrorKind::InvalidSource,
                    "; a token endpoint answers without redirecting, is the URL right?",
                ),
                // Any other refusal refuses the identity: a subject token
                // the pool does not trust (invalid_grant), an audience it
                // does not know, a service account the pool may not
                // impersonate.
                _ if what == "STS" => (
                    ErrorKind::Denied,
                    "; check the audience, and that the pool provider trusts the token's issuer",
                ),
                _ => (
                    ErrorKind::Denied,
                    "; check that the pool's principal has roles/iam.workloadIdentityUser on the service account",
                ),
            };
            return Err(self.fail(
                kind,
                format!("{what} refused the exchange (HTTP {status}{reason}){hint}"),
            ));
        }
        if more {
            return Err(too_large());
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const POOL: &str = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/k8s";
    const SA: &str = "reader@proj.iam.gserviceaccount.com";

    fn file_json(token_url: &str, impersonation: Option<&str>, source: &str) -> String {
        let imp = impersonation
            .map(|u| format!(r#""service_account_impersonation_url": "{u}","#))
            .unwrap_or_default();
        format!(
            r#"{{"type": "external_account", "audience": "{POOL}",
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": "{token_url}", {imp}
                "credential_source": {source}}}"#
        )
    }

    fn parse(json: &str) -> Result<Parsed, SyncError> {
        ExternalAccount::parse(Path::new("/etc/gcp/creds.json"), json.as_bytes())
    }

    fn imp_url(base: &str) -> String {
        format!("{base}/v1/projects/-/serviceAccounts/{SA}:generateAccessToken")
    }

    #[test]
    fn file_sourced_external_accounts_parse() {
        let Parsed::External(a) = parse(&file_json(
            "https://sts.googleapis.com/v1/token",
            Some(&imp_url("https://iamcredentials.googleapis.com")),
            r#"{"file": "/var/run/secrets/tokens/gcp"}"#,
        ))
        .unwrap() else {
            panic!("not supported")
        };
        assert_eq!(a.audience, POOL);
        assert_eq!(a.subject_token_type, "urn:ietf:params:oauth:token-type:jwt");
        assert_eq!(a.token_url, "https://sts.googleapis.com/v1/token");
        assert_eq!(a.service_account.as_deref(), Some(SA));
        assert_eq!(a.impersonation_lifetime, 3600);
        assert_eq!(a.subject_file, PathBuf::from("/var/run/secrets/tokens/gcp"));
        assert_eq!(a.format, SubjectFormat::Text);
        assert!(a.identity().contains(SA), "{}", a.identity());
        assert!(a.identity().contains("/etc/gcp/creds.json"));

        let Parsed::External(a) = parse(&file_json(
            "http://127.0.0.1:9/token",
            None,
            r#"{"file": "/t", "format": {"type": "json", "subject_token_field_name": "id_token"}}"#,
        ))
        .unwrap() else {
            panic!("not supported")
        };
        assert_eq!(
            a.format,
            SubjectFormat::Json {
                field: "id_token".into()
            }
        );
        assert_eq!(a.service_account, None);
        assert!(a.identity().contains(POOL), "{}", a.identity());
        // Percent-encoded emails, and a lifetime asked for.
        let json = file_json(
            "https://sts.googleapis.com/v1/token",
            Some("https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/a%40p.iam.gserviceaccount.com:generateAccessToken"),
            r#"{"file": "/t"}"#,
        )
        .replace(
            r#""type""#,
            r#""service_account_impersonation": {"token_lifetime_seconds": 1200}, "type""#,
        );
        let Parsed::External(a) = parse(&json).unwrap() else {
            panic!("not supported")
        };
        assert_eq!(
            a.service_account.as_deref(),
            Some("a@p.iam.gserviceaccount.com")
        );
        assert_eq!(a.impersonation_lifetime, 1200);
    }

    #[test]
    fn other_credentials_are_named_not_used() {
        let unsupported = |json: &str| match parse(json).unwrap() {
            Parsed::Unsupported(kind) => kind,
            Parsed::External(_) => panic!("taken: {json}"),
        };
        assert_eq!(
            unsupported(r#"{"type": "authorized_user", "refresh_token": "1//x"}"#),
            "authorized_user"
        );
        assert_eq!(
            unsupported(r#"{"type": "service_account", "private_key": "-----BEGIN"}"#),
            "service_account"
        );
        let sts = "https://sts.googleapis.com/v1/token";
        let url = unsupported(&file_json(
            sts,
            None,
            r#"{"url": "http://169.254.169.254/t"}"#,
        ));
        assert!(
            url.contains("external_account") && url.contains("url"),
            "{url}"
        );
        let exe = unsupported(&file_json(sts, None, r#"{"executable": {"command": "x"}}"#));
        assert!(exe.contains("executable"), "{exe}");
        let aws = unsupported(&file_json(
            sts,
            None,
            r#"{"environment_id": "aws1", "region_url": "http://169.254.169.254"}"#,
        ));
        assert!(aws.contains("environment_id"), "{aws}");
        // Not JSON: its text (a key, say) is not repeated.
        let junk = unsupported("-----BEGIN PRIVATE KEY----- s3cr3t");
        assert!(
            junk.starts_with("unreadable") && !junk.contains("s3cr3t"),
            "{junk}"
        );
    }

    #[test]
    fn broken_external_accounts_are_errors() {
        let sts = "https://sts.googleapis.com/v1/token";
        for (json, says) in [
            (
                file_json(sts, None, r#"{"file": "/t"}"#).replace(POOL, ""),
                "audience",
            ),
            (
                file_json("http://sts.example.com/token", None, r#"{"file": "/t"}"#),
                "token_url",
            ),
            (
                file_json("ftp://127.0.0.1/token", None, r#"{"file": "/t"}"#),
                "token_url",
            ),
            (file_json("sts", None, r#"{"file": "/t"}"#), "token_url"),
            (
                file_json(
                    sts,
                    Some("http://iam.example.com/v1/x:generateAccessToken"),
                    r#"{"file": "/t"}"#,
                ),
                "service_account_impersonation_url",
            ),
            (
                file_json(
                    sts,
                    Some("https://iamcredentials.googleapis.com/v1/projects/-/x"),
                    r#"{"file": "/t"}"#,
                ),
                "names no service account",
            ),
            (
                file_json(sts, None, r#"{"file": "/t", "format": {"type": "json"}}"#),
                "subject_token_field_name",
            ),
            (
                file_json(sts, None, r#"{"file": "/t", "format": {"type": "xml"}}"#),
                "xml",
            ),
        ] {
            let e = parse(&json).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{json}");
            assert!(e.message.contains(says), "{says}: {}", e.message);
            assert!(e.message.contains("/etc/gcp/creds.json"), "{}", e.message);
        }
    }

    #[test]
    fn error_answers_give_a_code_and_a_line() {
        assert_eq!(
            error_reason(
                br#"{"error":"invalid_grant","error_description":"The token has expired.\nmore"}"#
            ),
            "invalid_grant: The token has expired."
        );
        assert_eq!(
            error_reason(br#"{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}"#),
            "PERMISSION_DENIED: Permission denied"
        );
        assert_eq!(error_reason(br#"{"error":"not a code!"}"#), "");
        assert_eq!(error_reason(b"<html>eyJ.token</html>"), "");
    }

    /// One request a fixture saw.
    #[derive(Clone, Debug)]
    struct Seen {
        path: String,
        authorization: Option<String>,
        body: String,
    }

    /// A loopback HTTP server answering each request by `answer(path)`:
    /// a status and a body. The requests are kept.
    async fn fixture(
        answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static,
    ) -> (String, Arc<std::sync::Mutex<Vec<Seen>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (seen, answer) = (Arc::clone(&seen), Arc::clone(&answer));
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    let (head, body) = loop {
                        let n = conn.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        req.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&req).to_string();
                        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                            let len = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if rest.len() >= len {
                                break (head.to_string(), rest.to_string());
                            }
                        }
                    };
                    let path = head
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_string();
                    let authorization = head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("authorization")
                            .then(|| v.trim().to_string())
                    });
                    let (status, text) = answer(&path);
                    seen.lock().unwrap().push(Seen {
                        path,
                        authorization,
                        body,
                    });
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        (url, kept)
    }

    fn account(base: &str, impersonate: bool, subject_file: &Path) -> ExternalAccount {
        let json = file_json(
            &format!("{base}/v1/token"),
            impersonate.then(|| imp_url(base)).as_deref(),
            &format!(r#"{{"file": "{}"}}"#, subject_file.display()),
        );
        match parse(&json).unwrap() {
            Parsed::External(a) => a,
            Parsed::Unsupported(k) => panic!("{k}"),
        }
    }

    const JWT: &str = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzYSJ9.c2ln";

    #[tokio::test]
    async fn the_exchange_sends_the_documented_fields_and_impersonates() {
        let expire = humantime::format_rfc3339(SystemTime::now() + Duration::from_secs(3600));
        let (url, seen) = fixture(move |path| {
            if path.ends_with(":generateAccessToken") {
                (200, format!(r#"{{"accessToken":"ya29.sa","expireTime":"{expire}"}}"#))
            } else {
                (200, r#"{"access_token":"ya29.sts","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":3600}"#.into())
            }
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let subject = dir.path().join("token");
        std::fs::write(&subject, format!("{JWT}\n")).unwrap();
        let p = Arc::new(ExternalAccountProvider::new(account(&url, true, &subject)));
        let net = NetPolicy::local();
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (p, net) = (Arc::clone(&p), net.clone());
                tokio::spawn(async move { p.token(&net).await })
            })
            .collect();
        for c in calls {
            assert_eq!(&*c.await.unwrap().unwrap(), "ya29.sa");
        }
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 2, "one exchange: {requests:?}");
        assert_eq!(requests[0].path, "/v1/token");
        let form: HashMap<String, String> = form_urlencoded::parse(requests[0].body.as_bytes())
            .into_owned()
            .collect();
        assert_eq!(form["grant_type"], GRANT_TYPE);
        assert_eq!(form["audience"], POOL);
        assert_eq!(form["scope"], STS_SCOPE);
        assert_eq!(form["requested_token_type"], ACCESS_TOKEN_TYPE);
        assert_eq!(
            form["subject_token_type"],
            "urn:ietf:params:oauth:token-type:jwt"
        );
        assert_eq!(form["subject_token"], JWT);
        assert_eq!(requests[0].authorization, None);
        assert_eq!(
            requests[1].path,
            format!("/v1/projects/-/serviceAccounts/{SA}:generateAccessToken")
        );
        assert_eq!(
            requests[1].authorization.as_deref(),
            Some("Bearer ya29.sts")
        );
        let body: serde_json::Value = serde_json::from_str(&requests[1].body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"scope": [READ_SCOPE], "lifetime": "3600s"})
        );
        // Kept, and refreshed 5 minutes before it expires.
        let refresh = p.cache.lock().await.as_ref().unwrap().refresh_at;
        let left = refresh - Instant::now();
        assert!(
            left > Duration::from_secs(3200) && left <= Duration::from_secs(3300),
            "{left:?}"
        );

        // Due: the next exchange reads the rotated subject token.
        std::fs::write(&subject, "eyJ.second.sig").unwrap();
        p.cache.lock().await.as_mut().unwrap().refresh_at = Instant::now();
        p.token(&net).await.unwrap();
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 4);
        assert!(
            requests[2].body.contains("subject_token=eyJ.second.sig"),
            "{}",
            requests[2].body
        );

        // A failed refresh while the token lives keeps it, for a while.
        std::fs::remove_file(&subject).unwrap();
        p.cache.lock().await.as_mut().unwrap().refresh_at = Instant::now();
        assert_eq!(&*p.token(&net).await.unwrap(), "ya29.sa");
        let next = p.cache.lock().await.as_ref().unwrap().refresh_at;
        assert!(next > Instant::now() + Duration::from_secs(20));
        // Expired: the failure is the answer.
        {
            let mut cache = p.cache.lock().await;
            let c = cache.as_mut().unwrap();
            (c.expires_at, c.refresh_at) = (Instant::now(), Instant::now());
        }
        let e = p.token(&net).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(e.message.contains("subject token file"), "{}", e.message);
    }

    #[tokio::test]
    async fn sts_tokens_live_as_long_as_sts_says() {
        let (url, seen) = fixture(|_| {
            (
                200,
                r#"{"access_token":"ya29.short","token_type":"Bearer","expires_in":4}"#.into(),
            )
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let subject = dir.path().join("token.json");
        std::fs::write(&subject, format!(r#"{{"id_token": "{JWT}"}}"#)).unwrap();
        let mut a = account(&url, false, &subject);
        a.format = SubjectFormat::Json {
            field: "id_token".into(),
        };
        let p = ExternalAccountProvider::new(a);
        let net = NetPolicy::local();
        assert_eq!(&*p.token(&net).await.unwrap(), "ya29.short");
        assert_eq!(&*p.token(&net).await.unwrap(), "ya29.short");
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert!(seen.lock().unwrap()[0]
            .body
            .contains(&format!("subject_token={JWT}")));
        // Halfway through a short life, it is exchanged again.
        tokio::time::sleep(Duration::from_millis(2100)).await;
        p.token(&net).await.unwrap();
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_refusal_is_denied_and_names_the_identity_not_the_token() {
        // Endpoints that echo what they were sent.
        let (url, _) = fixture(|path| {
            if path.ends_with(":generateAccessToken") {
                (403, r#"{"error":{"code":403,"message":"Permission denied for Bearer ya29.sts","status":"PERMISSION_DENIED"}}"#.into())
            } else if path.contains("refuse") {
                (400, format!(r#"{{"error":"invalid_grant","error_description":"Bad token {JWT}"}}"#))
            } else {
                (200, r#"{"access_token":"ya29.sts","expires_in":3600}"#.into())
            }
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let subject = dir.path().join("token");
        std::fs::write(&subject, JWT).unwrap();
        let net = NetPolicy::local();

        let mut a = account(&url, false, &subject);
        a.token_url = format!("{url}/refuse");
        let e = ExternalAccountProvider::new(a)
            .token(&net)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(e.message.contains(POOL), "{}", e.message);
        assert!(e.message.contains("invalid_grant"), "{}", e.message);
        assert!(e.message.contains("HTTP 400"), "{}", e.message);
        assert!(!e.message.contains(JWT), "{}", e.message);

        let e = ExternalAccountProvider::new(account(&url, true, &subject))
            .token(&net)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(e.message.contains(SA), "{}", e.message);
        assert!(e.message.contains("PERMISSION_DENIED"), "{}", e.message);
        assert!(!e.message.contains("ya29.sts"), "{}", e.message);
        assert!(!e.message.contains(JWT), "{}", e.message);
        assert!(!e.message.contains('\n'), "{}", e.message);
    }

    #[tokio::test]
    async fn endpoints_obey_where_a_sync_may_connect() {
        let (url, seen) =
            fixture(|_| (200, r#"{"access_token":"x","expires_in":60}"#.into())).await;
        let dir = tempfile::tempdir().unwrap();
        let subject = dir.path().join("token");
        std::fs::write(&subject, JWT).unwrap();
        // A registry reachable from other hosts keeps off loopback.
        let p = ExternalAccountProvider::new(account(&url, false, &subject));
        let e = p.token(&NetPolicy::default()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSource, "{}", e.message);
        assert!(e.message.contains("loopback"), "{}", e.message);
        // ...unless the admin lists the endpoint.
        let listed = NetPolicy::new(false, [url.as_str()]).unwrap();
        assert_eq!(&*p.token(&listed).await.unwrap(), "x");
        assert_eq!(seen.lock().unwrap().len(), 1);
        // A name that resolves to loopback is refused when it resolves.
        let mut a = account(&url, false, &subject);
        a.token_url = url.replace("127.0.0.1", "localhost") + "/v1/token";
        let e = ExternalAccountProvider::new(a)
            .token(&NetPolicy::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSource, "{}", e.message);
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn oversized_or_odd_answers_are_refused() {
        let big = "x".repeat(ANSWER_CAP + 1);
        let (url, _) = fixture(move |path| {
            if path.contains("big") {
                (200, format!(r#"{{"access_token":"{big}"}}"#))
            } else if path.contains("down") {
                (503, String::new())
            } else {
                (200, "<html>".into())
            }
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let subject = dir.path().join("token");
        std::fs::write(&subject, JWT).unwrap();
        let net = NetPolicy::local();
        for (path, kind, says) in [
            ("big", ErrorKind::InvalidSource, "larger than"),
            ("down", ErrorKind::Transient, "HTTP 503"),
            ("odd", ErrorKind::InvalidSource, "no access token"),
        ] {
            let mut a = account(&url, false, &subject);
            a.token_url = format!("{url}/{path}");
            let e = ExternalAccountProvider::new(a)
                .token(&net)
                .await
                .unwrap_err();
            assert_eq!(e.kind, kind, "{path}: {}", e.message);
            assert!(e.message.contains(says), "{path}: {}", e.message);
        }
        // Nothing listens on port 1: worth retrying.
        let mut a = account(&url, false, &subject);
        a.token_url = "http://127.0.0.1:1/v1/token".into();
        let e = ExternalAccountProvider::new(a)
            .token(&net)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient, "{}", e.message);
    }
}
