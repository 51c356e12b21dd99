//! `gs://BUCKET[/PREFIX]`: the objects under `PREFIX/` of a Google Cloud
//! Storage bucket, over the GCS JSON API.
//!
//! Why not `object_store`, which `s3://` and `azure://` use: its GCS client
//! speaks the XML API, which `gcp-storage-emulator` (what tests and local
//! setups run) does not serve — a listing answers 501 and a GET lacks
//! `Last-Modified` — and its listing drops the `md5Hash` the JSON API gives
//! for every object written in one piece, which the sealer checks.
//!
//! The endpoint is `?endpoint=` in the URI, else `STORAGE_EMULATOR_HOST`
//! (the variable the Google client libraries read), else
//! `https://storage.googleapis.com`. A secret is an OAuth 2 access token
//! (`Authorization: Bearer`). Without one, a job uses workload identity
//! when `GOOGLE_APPLICATION_CREDENTIALS` names an `external_account` file
//! whose subject token is a file ([`crate::gcp_identity`]: the token
//! exchange, its cache and its refusals); else requests are anonymous,
//! which public buckets and the emulator accept. `?region=` is accepted,
//! as on any object-store URI, and ignored: GCS requests name no region.
//! `?checksum=none` leaves the listing's `md5Hash` unchecked (sizes still
//! are).
//!
//! Not supported: the host's other Google credentials (`authorized_user`,
//! `service_account` keys, external accounts whose token comes from a URL,
//! a program or AWS). A refused request without a secret names what the
//! file holds and says it is not used.
//!
//! Each object is listed with its generation and read with
//! `ifGenerationMatch`, so an object overwritten mid-job fails it with
//! `SOURCE_CHANGED` instead of mixing two contents.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use serde::Deserialize;

use crate::gcp_identity::{ExternalAccountProvider, HostCredentials};
use crate::http::{self, bearer_token, endpoint_url, segment};
use crate::net::NetPolicy;
use crate::source::tree_path;
use crate::store::parse_uri;
use crate::{ByteStream, Checksum, ErrorKind, Object, Source, SourceOptions, SyncError};

/// Google's endpoint, when neither the URI nor the environment names one.
const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
/// A listing that kept handing out page tokens would never end the job.
const MAX_PAGES: usize = 1_000_000;

/// A bucket prefix.
pub struct GcsSource {
    uri: String,
    bucket: String,
    /// Without leading or trailing `/`; empty for the whole bucket.
    prefix: String,
    endpoint: String,
    token: Option<String>,
    http: reqwest::Client,
    /// False with `?checksum=none`: `md5Hash` is not checked.
    verify_checksums: bool,
    /// Where tokens come from without a secret: workload identity, when
    /// the host's credentials file configures it.
    identity: Option<Arc<ExternalAccountProvider>>,
    /// What the host's credentials file holds when it is not used (its
    /// `type`, or why it cannot be read): a refusal says so.
    unused_credentials: Option<String>,
    /// Where the token exchange may connect: the job's policy.
    net: NetPolicy,
}

/// A bucket name as GCS allows it: 3 to 222 of lower-case letters, digits,
/// `-`, `_` and `.`, starting and ending with a letter or digit.
fn valid_bucket(b: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes = b.as_bytes();
    (3..=222).contains(&bytes.len())
        && bytes
            .iter()
            .all(|&c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
        && alnum(bytes[0])
        && alnum(bytes[bytes.len() - 1])
}

/// `STORAGE_EMULATOR_HOST` as the Google libraries read it: a URL, or a
/// bare `host:port` that means plain HTTP.
fn emulator_endpoint(raw: &str) -> String {
    let raw = raw.trim();
    if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    }
}

/// A JSON API number: documented as a string (`"size": "123"`), though
/// some servers write a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Int64 {
    Text(String),
    Number(u64),
}

impl Int64 {
    fn value(&self) -> Option<u64> {
        match self {
            Int64::Text(s) => s.parse().ok(),
            Int64::Number(n) => Some(*n),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectList {
    #[serde(default)]
    items: Vec<GcsObject>,
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GcsObject {
    name: String,
    size: Int64,
    md5_hash: Option<String>,
    generation: Int64,
}

impl GcsSource {
    pub fn new(uri: &str, opts: &SourceOptions) -> Result<Self, SyncError> {
        let invalid =
            |why: String| SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"));
        if !uri.starts_with("gs://") {
            return Err(invalid("not a gs:// URI".into()));
        }
        let p = parse_uri(uri)?;
        if !valid_bucket(&p.authority) {
            return Err(invalid(format!(
                "{:?} is not a bucket name (3 to 222 of a-z, 0-9, '-', '_', '.'); use gs://BUCKET/PREFIX",
                p.authority
            )));
        }
        let endpoint = match (&p.endpoint, std::env::var("STORAGE_EMULATOR_HOST")) {
            (Some(e), _) => endpoint_url(uri, "?endpoint=", e, &opts.net)?,
            (None, Ok(e)) if !e.trim().is_empty() => endpoint_url(
                uri,
                "STORAGE_EMULATOR_HOST",
                &emulator_endpoint(&e),
                &opts.net,
            )?,
            _ => DEFAULT_ENDPOINT.to_string(),
        };
        let token = bearer_token(uri, opts.secret.as_deref())?;
        // The host's credentials only for a job without a secret: a job
        // with one never depends on the host's file.
        let host = match token {
            Some(_) => HostCredentials::None,
            None => crate::gcp_identity::from_env_once()
                .map_err(|e| SyncError::new(e.kind, format!("{uri}: {}", e.message)))?,
        };
        let (identity, unused_credentials) = match host {
            HostCredentials::None => (None, None),
            HostCredentials::External(p) => (Some(p), None),
            HostCredentials::Unsupported(kind) => (None, Some(kind)),
        };
        Ok(GcsSource {
            uri: uri.to_string(),
            bucket: p.authority,
            prefix: p.path,
            endpoint,
            token,
            http: http::client(uri, &opts.net)?,
            verify_checksums: p.verify_checksums,
            identity,
            unused_credentials,
            net: opts.net.clone(),
        })
    }

    fn list_url(&self, page: Option<&str>) -> Result<url::Url, SyncError> {
        let mut url = self.url(&format!(
            "{}/storage/v1/b/{}/o",
            self.endpoint,
            segment(&self.bucket)
        ))?;
        let prefix = format!("{}/", self.prefix);
        let pairs = [
            (
                "prefix",
                Some(prefix.as_str()).filter(|_| !self.prefix.is_empty()),
            ),
            ("pageToken", page),
        ];
        // Only when there is a pair: an empty `?` is still a query.
        if pairs.iter().any(|(_, v)| v.is_some()) {
            let mut q = url.query_pairs_mut();
            for (k, v) in pairs {
                if let Some(v) = v {
                    q.append_pair(k, v);
                }
            }
        }
        Ok(url)
    }

    fn download_url(&self, name: &str, generation: Option<&str>) -> Result<url::Url, SyncError> {
        let mut url = self.url(&format!(
            "{}/download/storage/v1/b/{}/o/{}",
            self.endpoint,
            segment(&self.bucket),
            segment(name)
        ))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("alt", "media");
            if let Some(g) = generation {
                q.append_pair("ifGenerationMatch", g);
            }
        }
        Ok(url)
    }

    fn url(&self, s: &str) -> Result<url::Url, SyncError> {
        url::Url::parse(s).map_err(|e| {
            SyncError::new(ErrorKind::InvalidSource, format!("{}: {s}: {e}", self.uri))
        })
    }

    /// The token a request carries: the secret, else one of workload
    /// identity (kept, or exchanged now), else none.
    async fn bearer(&self, what: &str) -> Result<Option<Arc<str>>, SyncError> {
        match (&self.token, &self.identity) {
            (Some(t), _) => Ok(Some(Arc::from(t.as_str()))),
            (None, Some(p)) => p.token(&self.net).await.map(Some).map_err(|e| {
                SyncError::new(e.kind, format!("{}: {what}: {}", self.uri, e.message))
            }),
            (None, None) => Ok(None),
        }
    }

    async fn send(&self, url: url::Url, what: &str) -> Result<reqwest::Response, SyncError> {
        let token = self.bearer(what).await?;
        let req = http::get(&self.http, url, token.as_deref());
        http::send(req, &self.uri, what, |r| {
            self.status_error(what, r.status, &r.reason())
        })
        .await
    }

    fn status_error(&self, what: &str, status: u16, reason: &str) -> SyncError {
        let uri = &self.uri;
        let reason = if reason.is_empty() {
            String::new()
        } else {
            format!(" ({reason})")
        };
        match status {
            404 => SyncError::new(
                ErrorKind::NotFound,
                format!(
                    "{uri}: {what}: not found{reason}; does bucket {} exist?",
                    self.bucket
                ),
            ),
            401 | 403 => SyncError::new(
                ErrorKind::Denied,
                if self.token.is_some() {
                    format!("{uri}: {what}: access denied{reason}; the access token secret expired or lacks storage.objects.list/get")
                } else if let Some(p) = &self.identity {
                    // The exchange worked: the bucket refuses the identity.
                    format!(
                        "{uri}: {what}: access denied{reason} to {}; check the bucket's IAM: it needs storage.objects.list and storage.objects.get on gs://{} (roles/storage.objectViewer)",
                        p.account().identity(),
                        self.bucket
                    )
                } else if let Some(kind) = &self.unused_credentials {
                    format!("{uri}: {what}: access denied{reason}; the registry's Google credentials (GOOGLE_APPLICATION_CREDENTIALS, {kind}) are not used: gs:// workload identity takes only an external_account whose credential_source is a file; store an OAuth 2 access token as a secret and name it in the job")
                } else {
                    format!("{uri}: {what}: access denied{reason}; set a secret holding an OAuth 2 access token")
                },
            ),
            _ => SyncError::from_status(status, format!("{uri}: {what}: HTTP {status}{reason}")),
        }
    }

    fn object(&self, o: GcsObject) -> Result<Object, SyncError> {
        let bad = |what: &str| {
            SyncError::new(
                ErrorKind::InvalidSource,
                format!(
                    "{}: {}: the listing gave an unreadable {what}",
                    self.uri, o.name
                ),
            )
        };
        let size = o.size.value().ok_or_else(|| bad("size"))?;
        let generation = o.generation.value().ok_or_else(|| bad("generation"))?;
        // Composite objects have no MD5 (only a CRC32C): size alone then.
        let checksum = match o.md5_hash.as_ref().filter(|_| self.verify_checksums) {
            Some(b64) => Some(Checksum::Md5(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .ok()
                    .and_then(|b| <[u8; 16]>::try_from(b).ok())
                    .ok_or_else(|| bad("md5Hash"))?,
            )),
            None => None,
        };
        let rel = if self.prefix.is_empty() {
            o.name.as_str()
        } else {
            o.name
                .strip_prefix(self.prefix.as_str())
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(&o.name)
        };
        Ok(Object {
            path: tree_path(&self.uri, &o.name, rel)?,
            key: o.name.clone(),
            size,
            checksum,
            mismatch_hint: None,
            // A generation is the object's version id: every write makes a
            // new one, so it names the bytes even with `?checksum=none`.
            identity: Some(serde_json::json!(["generation", generation, size, o.name]).to_string()),
            version: Some(generation.to_string()),
            mode: crate::FILE_MODE,
        })
    }
}

/// Whether a download's `x-goog-generation` or `x-goog-hash` MD5 differs
/// from what the listing gave for the object.
fn answered_another_object(headers: &reqwest::header::HeaderMap, object: &Object) -> bool {
    let generation = headers
        .get("x-goog-generation")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if let (Some(got), Some(want)) = (generation, object.version.as_deref()) {
        if got != want {
            return true;
        }
    }
    let md5 = headers
        .get_all("x-goog-hash")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|h| h.trim().strip_prefix("md5="))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|b| <[u8; 16]>::try_from(b).ok());
    matches!((md5, object.checksum), (Some(got), Some(Checksum::Md5(want))) if got != want)
}

#[async_trait]
impl Source for GcsSource {
    fn uri(&self) -> &str {
        &self.uri
    }

    fn reuse_scope(&self) -> Option<String> {
        Some(format!("gs://{}@{}", self.bucket, self.endpoint))
    }

    async fn list(&self) -> Result<Vec<Object>, SyncError> {
        let mut out = Vec::new();
        let mut page: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let url = self.list_url(page.as_deref())?;
            let resp = self.send(url, "listing").await?;
            let body = http::body(resp, &self.uri, "listing").await?;
            let list: ObjectList = http::json(&self.uri, "listing", &self.endpoint, &body)?;
            for o in list.items {
                // Folder markers the console writes.
                if o.name.ends_with('/') {
                    continue;
                }
                out.push(self.object(o)?);
            }
            match list.next_page_token.filter(|t| !t.is_empty()) {
                Some(t) if page.as_deref() == Some(t.as_str()) => break,
                Some(t) => page = Some(t),
                None => return Ok(out),
            }
        }
        Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{}: listing: the page tokens do not end", self.uri),
        ))
    }

    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError> {
        let url = self.download_url(&object.key, object.version.as_deref())?;
        let resp = self
            .send(url, &object.key)
            .await
            .map_err(|e| match e.kind {
                // Listed a moment ago: deleted since (404), or overwritten, so
                // the generation no longer matches (412).
                ErrorKind::NotFound => SyncError::new(
                    ErrorKind::Changed,
                    format!("{}: {} vanished after it was listed", self.uri, object.key),
                ),
                ErrorKind::Changed => SyncError::new(
                    ErrorKind::Changed,
                    format!("{}: {} changed after it was listed", self.uri, object.key),
                ),
                _ => e,
            })?;
        // Servers that ignore the precondition (the emulator does) still
        // say which object they send: its generation, or its MD5.
        if answered_another_object(resp.headers(), object) {
            return Err(SyncError::new(
                ErrorKind::Changed,
                format!("{}: {} changed after it was listed", self.uri, object.key),
            ));
        }
        Ok(http::stream(resp, &self.uri, &object.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(uri: &str) -> GcsSource {
        let local = SourceOptions {
            net: crate::NetPolicy::local(),
            ..Default::default()
        };
        GcsSource::new(uri, &local).unwrap()
    }

    #[test]
    fn uris_name_a_bucket_and_a_prefix() {
        let s = source("gs://my-bucket/models/qwen/?endpoint=http://127.0.0.1:9023/");
        assert_eq!(
            (s.bucket.as_str(), s.prefix.as_str()),
            ("my-bucket", "models/qwen")
        );
        assert_eq!(s.endpoint, "http://127.0.0.1:9023");
        assert_eq!(source("gs://b_1.x?endpoint=http://h:1").prefix, "");
        assert!(source("gs://bkt/p?region=eu&endpoint=http://h:1").prefix == "p");
        for bad in [
            "gs://",
            "gs://ab",
            "gs://-bkt/p",
            "gs://bkt/p?color=red",
            "gs://bkt/p?endpoint=ftp://h",
            "s3://bkt/p",
        ] {
            let e = GcsSource::new(bad, &SourceOptions::default())
                .err()
                .unwrap();
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{bad}");
            assert!(e.message.starts_with(bad), "{bad}: {}", e.message);
        }
        assert_eq!(emulator_endpoint("localhost:9023"), "http://localhost:9023");
        assert_eq!(emulator_endpoint("https://x:1"), "https://x:1");
    }

    #[test]
    fn urls_follow_the_json_api() {
        let s = source("gs://bkt/a b?endpoint=http://h:1");
        assert_eq!(
            s.list_url(None).unwrap().as_str(),
            "http://h:1/storage/v1/b/bkt/o?prefix=a+b%2F"
        );
        assert_eq!(
            s.list_url(Some("t/1=")).unwrap().as_str(),
            "http://h:1/storage/v1/b/bkt/o?prefix=a+b%2F&pageToken=t%2F1%3D"
        );
        assert_eq!(
            s.download_url("a b/c#?.bin", Some("17")).unwrap().as_str(),
            "http://h:1/download/storage/v1/b/bkt/o/a%20b%2Fc%23%3F.bin?alt=media&ifGenerationMatch=17"
        );
        assert_eq!(
            source("gs://bkt?endpoint=http://h:1")
                .list_url(None)
                .unwrap()
                .query(),
            None
        );
    }

    #[test]
    fn listed_objects_carry_size_md5_and_generation() {
        let s = source("gs://bkt/p?endpoint=http://h:1");
        let list: ObjectList = serde_json::from_str(
            r#"{"items":[{"name":"p/d/a.bin","size":"100000","md5Hash":"1B2M2Y8AsgTpgAmY7PhCfg==","generation":"1712"},
                         {"name":"p/c.json","size":2,"generation":5}],"nextPageToken":"x"}"#,
        )
        .unwrap();
        assert_eq!(list.next_page_token.as_deref(), Some("x"));
        let mut items = list.items.into_iter();
        let a = s.object(items.next().unwrap()).unwrap();
        assert_eq!(
            (a.path.as_str(), a.key.as_str(), a.size),
            ("d/a.bin", "p/d/a.bin", 100000)
        );
        assert_eq!(
            a.checksum.unwrap().to_string(),
            "md5:d41d8cd98f00b204e9800998ecf8427e"
        );
        assert_eq!(a.version.as_deref(), Some("1712"));
        let c = s.object(items.next().unwrap()).unwrap();
        assert_eq!(
            (c.path.as_str(), c.size, c.checksum, c.version.as_deref()),
            ("c.json", 2, None, Some("5"))
        );
        let unchecked = source("gs://bkt/p?endpoint=http://h:1&checksum=none");
        let a: GcsObject = serde_json::from_str(
            r#"{"name":"p/a","size":"0","md5Hash":"1B2M2Y8AsgTpgAmY7PhCfg==","generation":"1"}"#,
        )
        .unwrap();
        assert_eq!(unchecked.object(a).unwrap().checksum, None);
        let bad: GcsObject =
            serde_json::from_str(r#"{"name":"p/x","size":"lots","generation":"1"}"#).unwrap();
        assert_eq!(s.object(bad).unwrap_err().kind, ErrorKind::InvalidSource);
        let escaping: GcsObject =
            serde_json::from_str(r#"{"name":"p/../x","size":"1","generation":"1"}"#).unwrap();
        assert_eq!(
            s.object(escaping).unwrap_err().kind,
            ErrorKind::InvalidSource
        );
    }

    #[test]
    fn downloads_of_another_generation_are_noticed() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let o = Object {
            path: "a".into(),
            key: "p/a".into(),
            size: 0,
            checksum: Some(Checksum::Md5([
                0xd4, 0x1d, 0x8c, 0xd9, 0x8f, 0x00, 0xb2, 0x04, 0xe9, 0x80, 0x09, 0x98, 0xec, 0xf8,
                0x42, 0x7e,
            ])),
            mismatch_hint: None,
            version: Some("17".into()),
            identity: None,
            mode: crate::FILE_MODE,
        };
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert!(!answered_another_object(&headers(&[]), &o));
        assert!(!answered_another_object(
            &headers(&[
                ("x-goog-generation", "17"),
                (
                    "x-goog-hash",
                    "crc32c=AAAAAA==,md5=1B2M2Y8AsgTpgAmY7PhCfg=="
                )
            ]),
            &o
        ));
        assert!(answered_another_object(
            &headers(&[("x-goog-generation", "18")]),
            &o
        ));
        assert!(answered_another_object(
            &headers(&[
                ("x-goog-hash", "crc32c=AAAAAA=="),
                ("x-goog-hash", "md5=iwTV43ddKY54RV78XKQE1Q==")
            ]),
            &o
        ));
    }

    #[test]
    fn statuses_decide_the_kind() {
        let s = source("gs://bkt/p?endpoint=http://h:1");
        let e = s.status_error("listing", 404, "The specified bucket does not exist.");
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(
            e.message
                .starts_with("gs://bkt/p?endpoint=http://h:1: listing: not found"),
            "{}",
            e.message
        );
        assert_eq!(s.status_error("x", 401, "").kind, ErrorKind::Denied);
        assert_eq!(s.status_error("x", 403, "").kind, ErrorKind::Denied);
        assert_eq!(s.status_error("x", 412, "").kind, ErrorKind::Changed);
        assert_eq!(s.status_error("x", 503, "").kind, ErrorKind::Transient);
        assert_eq!(s.status_error("x", 429, "").kind, ErrorKind::Transient);
    }

    #[test]
    fn a_refusal_says_host_credentials_are_not_used() {
        let mut s = source("gs://bkt/p?endpoint=http://h:1");
        s.unused_credentials = Some("authorized_user".into());
        let e = s.status_error("listing", 401, "Anonymous caller");
        assert_eq!(e.kind, ErrorKind::Denied);
        assert!(
            e.message.contains("authorized_user") && e.message.contains("not used"),
            "{}",
            e.message
        );
        assert!(e.message.contains("secret"), "{}", e.message);
        // With a secret, the secret is what to check.
        s.token = Some("ya29.x".into());
        let e = s.status_error("listing", 403, "");
        assert!(!e.message.contains("not used"), "{}", e.message);
    }

    #[test]
    fn a_bucket_refusing_the_identity_names_it() {
        let mut s = source("gs://bkt/p?endpoint=http://h:1");
        let sa = "reader@proj.iam.gserviceaccount.com";
        s.identity = Some(Arc::new(ExternalAccountProvider::new(
            crate::gcp_identity::ExternalAccount {
                credentials_file: "/etc/gcp/creds.json".into(),
                audience: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k".into(),
                subject_token_type: "urn:ietf:params:oauth:token-type:jwt".into(),
                token_url: "https://sts.googleapis.com/v1/token".into(),
                impersonation_url: Some(format!("https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{sa}:generateAccessToken")),
                service_account: Some(sa.into()),
                impersonation_lifetime: 3600,
                subject_file: "/var/run/token".into(),
                format: crate::gcp_identity::SubjectFormat::Text,
            },
        )));
        let e = s.status_error("listing", 403, "Forbidden");
        assert_eq!(e.kind, ErrorKind::Denied);
        assert!(e.message.contains(sa), "{}", e.message);
        assert!(e.message.contains("IAM"), "{}", e.message);
        assert!(e.message.contains("gs://bkt"), "{}", e.message);
    }
}
