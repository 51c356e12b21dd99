//! Workload identity for `s3://`, `r2://` and `cw://` sources (SPEC.md
//! §8.1): a web-identity token the platform mounts in a file (a Kubernetes
//! service-account token, say) exchanged with STS `AssumeRoleWithWebIdentity`
//! for short-lived credentials of a role, so a job needs no stored secret.
//!
//! Configured as the AWS SDKs configure it, from the registry process's
//! environment ([`WebIdentity::from_env`]): `AWS_WEB_IDENTITY_TOKEN_FILE`,
//! `AWS_ROLE_ARN`, optionally `AWS_ROLE_SESSION_NAME` and
//! `AWS_ENDPOINT_URL_STS` (default `https://sts.{region}.amazonaws.com`).
//! [`WebIdentityProvider`] is an `object_store` credential provider: it
//! exchanges the token on first use, keeps the credential, and exchanges
//! again before it expires, reading the token file anew each time (the
//! platform rotates it).
//!
//! Why not `object_store`'s own web-identity provider: it speaks only
//! HTTPS to STS, so it cannot be tested against an STS on loopback, and it
//! takes no HTTP client from us. Not here: when workload identity applies
//! to a job (that is [`crate::store`]'s decision), and GCS, whose
//! federation is [`crate::gcp_identity`]'s.
//!
//! The token is a credential: it goes only into the body of the request to
//! STS, never into a message, a log line or a URL.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use object_store::aws::AwsCredential;
use object_store::CredentialProvider;
use serde::Deserialize;

use crate::http::{error_chain, first_line};
use crate::{ErrorKind, SyncError};

/// The session name STS records when `AWS_ROLE_SESSION_NAME` is not set.
const DEFAULT_SESSION_NAME: &str = "sealvol";
/// The longest an exchange may take before the request that waits on it
/// fails (and the job retries it).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long before expiry a long-lived credential is replaced.
const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// How long after a failed refresh the next is tried, while the current
/// credential still serves.
const RETRY_REFRESH: Duration = Duration::from_secs(30);

/// Where and as whom to exchange the token: the settings, read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebIdentity {
    /// The file holding the token (`AWS_WEB_IDENTITY_TOKEN_FILE`).
    pub token_file: PathBuf,
    /// The role to assume (`AWS_ROLE_ARN`).
    pub role_arn: String,
    /// `AWS_ROLE_SESSION_NAME`, else `sealvol`.
    pub session_name: String,
    /// The STS endpoint: `AWS_ENDPOINT_URL_STS`, else the regional one.
    pub sts_endpoint: String,
}

impl WebIdentity {
    /// The settings from the environment, as the AWS SDKs read it; `None`
    /// unless both `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` are
    /// set. The default STS endpoint is in `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`, else `us-east-1`), the SDKs' region, not a
    /// bucket's: an `r2://` bucket's region is `auto`.
    pub fn from_env() -> Result<Option<WebIdentity>, SyncError> {
        WebIdentity::from_vars(|k| std::env::var(k).ok())
    }

    /// [`WebIdentity::from_env`] over any variable lookup, for tests.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<WebIdentity>, SyncError> {
        let var = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let (Some(token_file), Some(role_arn)) =
            (var("AWS_WEB_IDENTITY_TOKEN_FILE"), var("AWS_ROLE_ARN"))
        else {
            return Ok(None);
        };
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let identity = WebIdentity {
            token_file: PathBuf::from(token_file),
            role_arn,
            session_name: var("AWS_ROLE_SESSION_NAME")
                .unwrap_or_else(|| DEFAULT_SESSION_NAME.to_string()),
            sts_endpoint: var("AWS_ENDPOINT_URL_STS")
                .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com")),
        };
        identity.check()?;
        Ok(Some(identity))
    }

    /// Fails on settings that could never work, before any request: a role
    /// that is not an ARN, an STS endpoint that is not a URL, or one that
    /// is plain HTTP to another host (the token would cross the network in
    /// clear text).
    pub fn check(&self) -> Result<(), SyncError> {
        let invalid =
            |why: String| SyncError::new(ErrorKind::InvalidSource, format!("web identity: {why}"));
        if !self.role_arn.starts_with("arn:") {
            return Err(invalid(format!(
                "AWS_ROLE_ARN {:?} is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)",
                self.role_arn
            )));
        }
        let url = url::Url::parse(&self.sts_endpoint).map_err(|e| {
            invalid(format!(
                "the STS endpoint {:?} is not a URL ({e}); set AWS_ENDPOINT_URL_STS to https://HOST",
                self.sts_endpoint
            ))
        })?;
        let loopback = url
            .host_str()
            .is_some_and(sealvol_spec::reference::is_loopback_host);
        match url.scheme() {
            "https" => Ok(()),
            "http" if loopback => Ok(()),
            _ => Err(invalid(format!(
                "the STS endpoint {} must be https:// (plain http:// only to a loopback address)",
                self.sts_endpoint
            ))),
        }
    }
}

/// The provider for the registry process's environment, made on first use
/// and shared by every job, so that concurrent jobs make one exchange;
/// `Ok(None)` when the environment configures no web identity.
pub fn from_env_once() -> Result<Option<Arc<WebIdentityProvider>>, SyncError> {
    static AMBIENT: OnceLock<Result<Option<Arc<WebIdentityProvider>>, SyncError>> = OnceLock::new();
    AMBIENT
        .get_or_init(|| {
            let Some(identity) = WebIdentity::from_env()? else {
                return Ok(None);
            };
            // The STS endpoint comes from the registry's own environment,
            // not from a job's URI: loopback is its admin's choice, while
            // link-local and metadata addresses stay refused.
            let http = crate::http::client("web identity", &crate::NetPolicy::local())?;
            Ok(Some(Arc::new(WebIdentityProvider::new(identity, http))))
        })
        .clone()
}

/// Credentials of the role, exchanged for the token and kept until shortly
/// before they expire.
pub struct WebIdentityProvider {
    identity: WebIdentity,
    http: reqwest::Client,
    /// Held across an exchange, so that requests arriving meanwhile wait
    /// for its result instead of each making their own.
    cache: tokio::sync::Mutex<Option<Cached>>,
}

struct Cached {
    credential: Arc<AwsCredential>,
    /// When to exchange again.
    refresh_at: Instant,
    /// When STS says the credential stops working.
    expires_at: Instant,
}

impl std::fmt::Debug for WebIdentityProvider {
    // No token or credential: only the settings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebIdentityProvider")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// When to replace a credential that lives `lifetime` from now: 5 minutes
/// before it expires, or halfway for one that lives less than 10 minutes
/// (the margin would eat most of it).
pub fn refresh_after(lifetime: Duration) -> Duration {
    if lifetime >= 2 * REFRESH_MARGIN {
        lifetime - REFRESH_MARGIN
    } else {
        lifetime / 2
    }
}

/// An STS answer to `AssumeRoleWithWebIdentity` (the root element, whose
/// name the XML reader does not check).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AssumeRoleResponse {
    assume_role_with_web_identity_result: AssumeRoleResult,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AssumeRoleResult {
    credentials: StsCredentials,
}

/// No `Debug`: it holds the secret key and session token.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    /// RFC 3339, UTC.
    expiration: String,
}

/// An STS error answer: `<ErrorResponse><Error><Code>…`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorResponse {
    error: StsError,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsError {
    code: String,
    #[serde(default)]
    message: String,
}

/// A credential from an STS answer, and when it expires.
fn parse_credentials(xml: &str) -> Result<(AwsCredential, SystemTime), String> {
    let answer: AssumeRoleResponse =
        quick_xml::de::from_str(xml).map_err(|e| format!("unexpected answer ({e})"))?;
    let c = answer.assume_role_with_web_identity_result.credentials;
    let expiration = humantime::parse_rfc3339_weak(c.expiration.trim())
        .map_err(|e| format!("unreadable Expiration {:?} ({e})", c.expiration))?;
    Ok((
        AwsCredential {
            key_id: c.access_key_id,
            secret_key: c.secret_access_key,
            token: Some(c.session_token),
        },
        expiration,
    ))
}

/// The code and message of an STS error answer, when it is one.
fn parse_error(xml: &str) -> Option<StsError> {
    quick_xml::de::from_str::<ErrorResponse>(xml)
        .ok()
        .map(|r| r.error)
}

/// What an STS refusal means for the job: the identity is refused
/// (`SOURCE_DENIED`), STS is busy or down (worth retrying), or the
/// settings are wrong (`INVALID_SOURCE`).
fn refusal_kind(status: u16, code: &str) -> ErrorKind {
    match code {
        "AccessDenied" | "InvalidIdentityToken" | "ExpiredTokenException" | "IDPRejectedClaim" => {
            ErrorKind::Denied
        }
        "IDPCommunicationError" | "Throttling" | "ServiceUnavailable" => ErrorKind::Transient,
        _ => SyncError::from_status(status, String::new()).kind,
    }
}

impl WebIdentityProvider {
    /// A provider for `identity` whose requests to STS go through `http`.
    pub fn new(identity: WebIdentity, http: reqwest::Client) -> WebIdentityProvider {
        WebIdentityProvider {
            identity,
            http,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// The role this provider assumes, for messages.
    pub fn role_arn(&self) -> &str {
        &self.identity.role_arn
    }

    /// A credential of the role: the kept one until its refresh time,
    /// else a new one. When a refresh fails while the kept one outlives
    /// the next try, that one is used and the refresh tried again
    /// [`RETRY_REFRESH`] later.
    pub async fn credential(&self) -> Result<Arc<AwsCredential>, SyncError> {
        let mut cache = self.cache.lock().await;
        let now = Instant::now();
        if let Some(c) = cache.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(Arc::clone(&c.credential));
        }
        match self.exchange().await {
            Ok((credential, expiration)) => {
                let lifetime = expiration
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                let credential = Arc::new(credential);
                tracing::debug!(
                    role = %self.identity.role_arn,
                    lifetime = ?lifetime,
                    "web identity exchanged for credentials of the role"
                );
                *cache = Some(Cached {
                    credential: Arc::clone(&credential),
                    refresh_at: now + refresh_after(lifetime),
                    expires_at: now + lifetime,
                });
                Ok(credential)
            }
            Err(e) => match cache.as_mut() {
                Some(c) if now + RETRY_REFRESH < c.expires_at => {
                    tracing::warn!(error = %e.message, "web identity refresh failed; the current credentials still serve");
                    // Not again on every request meanwhile: each would
                    // wait for the exchange while STS is down.
                    c.refresh_at = now + RETRY_REFRESH;
                    Ok(Arc::clone(&c.credential))
                }
                _ => Err(e),
            },
        }
    }

    /// One `AssumeRoleWithWebIdentity` call with the token as the file
    /// holds it now.
    async fn exchange(&self) -> Result<(AwsCredential, SystemTime), SyncError> {
        let id = &self.identity;
        let fail = |kind, why: String| {
            SyncError::new(
                kind,
                format!("web identity for role {}: {why}", id.role_arn),
            )
        };
        let token = tokio::fs::read_to_string(&id.token_file)
            .await
            .map_err(|e| {
                fail(
                    ErrorKind::Denied,
                    format!(
                        "cannot read the token file {} ({e}); check AWS_WEB_IDENTITY_TOKEN_FILE",
                        id.token_file.display()
                    ),
                )
            })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(fail(
                ErrorKind::Denied,
                format!("the token file {} is empty", id.token_file.display()),
            ));
        }
        // In the body, not the query: URLs end up in logs.
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "AssumeRoleWithWebIdentity")
            .append_pair("Version", "2011-06-15")
            .append_pair("RoleArn", &id.role_arn)
            .append_pair("RoleSessionName", &id.session_name)
            .append_pair("WebIdentityToken", token)
            .finish();
        let sent = self
            .http
            .post(&id.sts_endpoint)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .timeout(EXCHANGE_TIMEOUT)
            .body(body)
            .send()
            .await;
        // The text of an answer, errors and all; neither can hold the
        // token, but a server could echo it: scrub it anyway.
        let scrub = |s: &str| s.replace(token, "<token>");
        let transport = |e: reqwest::Error| {
            let kind = if e.is_builder() {
                ErrorKind::InvalidSource
            } else {
                ErrorKind::Transient
            };
            let why = scrub(&first_line(&error_chain(&e.without_url())));
            fail(kind, format!("STS {} unreachable: {why}", id.sts_endpoint))
        };
        let resp = sent.map_err(transport)?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(transport)?;
        if !(200..300).contains(&status) {
            let (kind, why) = match parse_error(&text) {
                Some(e) => (
                    refusal_kind(status, &e.code),
                    format!("{}: {}", e.code, first_line(&e.message)),
                ),
                None => (
                    refusal_kind(status, ""),
                    format!("HTTP {status}: {}", first_line(&text)),
                ),
            };
            let why = scrub(&why);
            return Err(fail(kind, format!("STS refused the exchange ({why})")));
        }
        parse_credentials(&text).map_err(|why| {
            fail(
                ErrorKind::InvalidSource,
                format!("STS {}: {why}", id.sts_endpoint),
            )
        })
    }
}

#[async_trait]
impl CredentialProvider for WebIdentityProvider {
    type Credential = AwsCredential;

    /// [`WebIdentityProvider::credential`], its error carried whole in an
    /// `object_store` error so that [`crate::store`] reads its kind back
    /// instead of guessing from text.
    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        self.credential()
            .await
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const ANSWER: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:ns:sa</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/reader/sealvol</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:sealvol</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>FQoGZXIvYXdzEBYaDK</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY</SecretAccessKey>
      <Expiration>2030-01-02T03:04:05Z</Expiration>
      <AccessKeyId>ASIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <Provider>www.amazon.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;

    const DENIED: &str = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>
  <RequestId>1</RequestId>
</ErrorResponse>"#;

    const ROLE: &str = "arn:aws:iam::123456789012:role/reader";

    #[test]
    fn answers_parse_into_credentials() {
        let (c, expires) = parse_credentials(ANSWER).unwrap();
        assert_eq!(c.key_id, "ASIAIOSFODNN7EXAMPLE");
        assert_eq!(c.secret_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
        assert_eq!(c.token.as_deref(), Some("FQoGZXIvYXdzEBYaDK"));
        assert_eq!(
            expires,
            humantime::parse_rfc3339("2030-01-02T03:04:05Z").unwrap()
        );
        // Fractions of a second, as moto writes them.
        let moto = ANSWER.replace("2030-01-02T03:04:05Z", "2030-01-02T03:04:05.105854Z");
        assert!(parse_credentials(&moto).is_ok());
        // Missing pieces and other documents are errors, not panics.
        for bad in [
            "",
            "not xml",
            DENIED,
            &ANSWER.replace("<SessionToken>FQoGZXIvYXdzEBYaDK</SessionToken>", ""),
            &ANSWER.replace("2030-01-02T03:04:05Z", "tomorrow"),
        ] {
            assert!(parse_credentials(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_parse_into_code_and_message() {
        let e = parse_error(DENIED).unwrap();
        assert_eq!(e.code, "AccessDenied");
        assert!(e.message.starts_with("Not authorized"), "{}", e.message);
        assert!(parse_error(ANSWER).is_none());
        assert!(parse_error("<html>").is_none());
        assert_eq!(refusal_kind(403, "AccessDenied"), ErrorKind::Denied);
        assert_eq!(refusal_kind(400, "InvalidIdentityToken"), ErrorKind::Denied);
        assert_eq!(
            refusal_kind(400, "ValidationError"),
            ErrorKind::InvalidSource
        );
        assert_eq!(refusal_kind(503, ""), ErrorKind::Transient);
        assert_eq!(refusal_kind(403, ""), ErrorKind::Denied);
    }

    #[test]
    fn refresh_comes_five_minutes_early_or_halfway() {
        let min = |m: u64| Duration::from_secs(60 * m);
        assert_eq!(refresh_after(min(60)), min(55));
        assert_eq!(refresh_after(min(15)), min(10));
        assert_eq!(refresh_after(min(10)), min(5));
        assert_eq!(refresh_after(min(8)), min(4));
        assert_eq!(
            refresh_after(Duration::from_secs(30)),
            Duration::from_secs(15)
        );
        assert_eq!(refresh_after(Duration::ZERO), Duration::ZERO);
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn settings_come_from_the_sdk_variables() {
        assert_eq!(WebIdentity::from_vars(vars(&[])).unwrap(), None);
        // Both are needed.
        assert_eq!(
            WebIdentity::from_vars(vars(&[("AWS_ROLE_ARN", ROLE)])).unwrap(),
            None
        );
        assert_eq!(
            WebIdentity::from_vars(vars(&[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")])).unwrap(),
            None
        );
        let id = WebIdentity::from_vars(vars(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
            ("AWS_ROLE_ARN", ROLE),
            ("AWS_REGION", "eu-west-1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(id.token_file, PathBuf::from("/var/run/token"));
        assert_eq!(id.session_name, "sealvol");
        assert_eq!(id.sts_endpoint, "https://sts.eu-west-1.amazonaws.com");
        let id = WebIdentity::from_vars(vars(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
            ("AWS_ROLE_ARN", ROLE),
            ("AWS_ROLE_SESSION_NAME", "job"),
            ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:5000"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(id.session_name, "job");
        assert_eq!(id.sts_endpoint, "http://127.0.0.1:5000");
    }

    #[test]
    fn plain_http_to_sts_only_on_loopback() {
        let with = |endpoint: &str, role: &str| {
            WebIdentity::from_vars(vars(&[
                ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
                ("AWS_ROLE_ARN", role),
                ("AWS_ENDPOINT_URL_STS", endpoint),
            ]))
        };
        for ok in [
            "https://sts.example.com",
            "http://127.0.0.1:5000",
            "http://localhost:5000",
            "http://[::1]:5000",
        ] {
            assert!(with(ok, ROLE).is_ok(), "{ok}");
        }
        for bad in [
            "http://sts.example.com",
            "http://127.0.0.1.evil.com",
            "ftp://127.0.0.1",
            "sts",
        ] {
            let e = with(bad, ROLE).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{bad}");
            assert!(e.message.contains("STS endpoint"), "{}", e.message);
        }
        let e = with("https://sts.example.com", "reader").unwrap_err();
        assert!(e.message.contains("AWS_ROLE_ARN"), "{}", e.message);
    }

    /// A one-answer-fits-all HTTP server on loopback: every request gets
    /// `status` and `body`; the requests' bodies are kept.
    async fn fake_sts(status: u16, body: String) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (body, seen) = (body.clone(), Arc::clone(&seen));
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    // Headers, then as many body bytes as they announce.
                    loop {
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
                                seen.lock().unwrap().push(rest.to_string());
                                break;
                            }
                        }
                    }
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, kept)
    }

    fn provider(endpoint: &str, token_file: &std::path::Path) -> WebIdentityProvider {
        WebIdentityProvider::new(
            WebIdentity {
                token_file: token_file.to_path_buf(),
                role_arn: ROLE.to_string(),
                session_name: "sealvol".to_string(),
                sts_endpoint: endpoint.to_string(),
            },
            reqwest::Client::new(),
        )
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_exchange_of_the_current_token() {
        let (url, seen) = fake_sts(200, ANSWER.to_string()).await;
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "eyJ.first.sig\n").unwrap();
        let p = Arc::new(provider(&url, &token_file));
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let p = Arc::clone(&p);
                tokio::spawn(async move { p.credential().await })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap().unwrap().key_id, "ASIAIOSFODNN7EXAMPLE");
        }
        let bodies = seen.lock().unwrap().clone();
        assert_eq!(bodies.len(), 1, "{bodies:?}");
        let form: HashMap<String, String> = form_urlencoded::parse(bodies[0].as_bytes())
            .into_owned()
            .collect();
        assert_eq!(form["Action"], "AssumeRoleWithWebIdentity");
        assert_eq!(form["RoleArn"], ROLE);
        assert_eq!(form["RoleSessionName"], "sealvol");
        assert_eq!(form["WebIdentityToken"], "eyJ.first.sig");

        // Due for a refresh: the next exchange reads the rotated token.
        std::fs::write(&token_file, "eyJ.second.sig").unwrap();
        p.cache.lock().await.as_mut().unwrap().refresh_at = Instant::now();
        p.credential().await.unwrap();
        let bodies = seen.lock().unwrap().clone();
        assert_eq!(bodies.len(), 2, "{bodies:?}");
        assert!(
            bodies[1].contains("WebIdentityToken=eyJ.second.sig"),
            "{}",
            bodies[1]
        );

        // A refresh that fails (the token file is gone) while the
        // credential still lives keeps it, and waits before trying again.
        std::fs::remove_file(&token_file).unwrap();
        p.cache.lock().await.as_mut().unwrap().refresh_at = Instant::now();
        assert_eq!(p.credential().await.unwrap().key_id, "ASIAIOSFODNN7EXAMPLE");
        let next = p.cache.lock().await.as_ref().unwrap().refresh_at;
        assert!(next > Instant::now() + Duration::from_secs(20));
        assert_eq!(seen.lock().unwrap().len(), 2);
        // Expired: the failure is the answer.
        {
            let mut cache = p.cache.lock().await;
            let c = cache.as_mut().unwrap();
            (c.expires_at, c.refresh_at) = (Instant::now(), Instant::now());
        }
        let e = p.credential().await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
    }

    #[tokio::test]
    async fn a_refusal_is_denied_and_names_the_role_not_the_token() {
        // A server that echoes the token back in its message.
        let token = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.c2ln";
        let echo = DENIED.replace("Not authorized", &format!("Not authorized with {token}"));
        let (url, _) = fake_sts(403, echo).await;
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, token).unwrap();
        let e = provider(&url, &token_file).credential().await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(e.message.contains(ROLE), "{}", e.message);
        assert!(e.message.contains("AccessDenied"), "{}", e.message);
        assert!(!e.message.contains(token), "{}", e.message);
        assert!(!e.message.contains('\n'), "{}", e.message);

        // Through object_store's trait, the error keeps its kind.
        let p = provider(&url, &token_file);
        let e = CredentialProvider::get_credential(&p).await.unwrap_err();
        let e = crate::store::classify("s3://b/p", "listing", e);
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(e.message.contains(ROLE), "{}", e.message);
        assert!(!e.message.contains(token), "{}", e.message);
    }

    #[tokio::test]
    async fn a_missing_token_file_or_a_dead_sts_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let e = provider("http://127.0.0.1:1", &missing)
            .credential()
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
        assert!(e.message.contains("token file"), "{}", e.message);
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "eyJ.x.y").unwrap();
        // Nothing listens on port 1: refused at once, worth retrying.
        let e = provider("http://127.0.0.1:1", &token_file)
            .credential()
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient, "{}", e.message);
        assert!(!e.message.contains("eyJ.x.y"), "{}", e.message);
    }
}
