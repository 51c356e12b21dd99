//! `hf://ORG/REPO[@REV]` and `hf://datasets/ORG/REPO[@REV]`: a Hugging Face
//! Hub repository, read over the Hub's public HTTP API (the endpoints the
//! `huggingface_hub` Python client calls), from `HF_ENDPOINT` or
//! `https://huggingface.co`.
//!
//! [`Source::list`] resolves `REV` (default `main`) to a commit with
//! `GET /api/{models,datasets}/ORG/REPO/revision/REV` and lists that
//! commit's tree (`/tree/SHA?recursive=true`, following `Link: rel="next"`
//! pages), so every object is pinned to the commit the job started from.
//! [`Source::open`] downloads `/{datasets/}ORG/REPO/resolve/SHA/PATH`,
//! following the redirect to the CDN. LFS files carry their SHA-256, which
//! the sealer checks; small files (plain git blobs) carry none, only a size.
//!
//! Not for Spaces, or for repositories named without an organization (the
//! Hub redirects those legacy names; write the full `ORG/REPO`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sealvol_sync::SyncError> {
//! use sealvol_sync::{Source, SourceOptions};
//! let hf = sealvol_sync::hf::HfSource::new("hf://Qwen/Qwen3-0.6B@main", &SourceOptions::default())?;
//! for o in hf.list().await? {
//!     println!("{} {} {:?}", o.path, o.size, o.checksum);
//! }
//! # Ok(()) }
//! ```

use std::collections::HashSet;

use async_trait::async_trait;
use serde::Deserialize;

use crate::http::{self, bearer_token, endpoint_url, segment};
use crate::source::tree_path;
use crate::{ByteStream, Checksum, ErrorKind, Object, Source, SourceOptions, SyncError};

/// The Hub, when `HF_ENDPOINT` is unset.
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// What `@REV` defaults to, as on the Hub.
const DEFAULT_REVISION: &str = "main";
/// Hub repository names are at most 96 characters per part.
const MAX_NAME: usize = 96;
/// Tree listings are paginated; a Hub that kept answering `next` would
/// otherwise never end the job.
const MAX_PAGES: usize = 100_000;

/// Percent-encodes a `/`-separated path segment by segment.
fn path_segments(path: &str) -> String {
    path.split('/').map(segment).collect::<Vec<_>>().join("/")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RepoKind {
    Model,
    Dataset,
}

impl RepoKind {
    /// The collection in `/api/{models,datasets}/…`.
    fn api(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }

    /// What precedes `ORG/REPO` in download URLs: nothing for models.
    fn download_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
}

/// What an `hf://` URI names.
#[derive(Debug, PartialEq, Eq)]
struct HfUri {
    kind: RepoKind,
    org: String,
    name: String,
    revision: String,
}

/// A Hub repository name part: letters, digits, `-`, `_`, `.`, not at either
/// end `-` or `.`, no `--` or `..` (the rules `huggingface_hub` checks).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
        && !s.contains("--")
        && !s.contains("..")
}

fn parse_hf_uri(uri: &str) -> Result<HfUri, SyncError> {
    let invalid = |why: &str| SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"));
    let rest = uri
        .strip_prefix("hf://")
        .ok_or_else(|| invalid("not an hf:// URI"))?;
    // Repository names hold no `@`, so the first one starts the revision,
    // which may itself hold `/` (`refs/pr/1`) and may come percent-encoded
    // as `huggingface_hub`'s file system writes it (`refs%2Fpr%2F1`).
    let (name, revision) = match rest.split_once('@') {
        Some((n, r)) => {
            let r = percent_encoding::percent_decode_str(r)
                .decode_utf8()
                .map_err(|_| invalid("the revision is not UTF-8"))?
                .into_owned();
            if r.is_empty() || r.chars().any(|c| c.is_control()) {
                return Err(invalid(
                    "the revision after @ is empty or holds control characters",
                ));
            }
            (n, r)
        }
        None => (rest, DEFAULT_REVISION.to_string()),
    };
    let parts: Vec<&str> = name.trim_end_matches('/').split('/').collect();
    let (kind, org, repo) = match parts.as_slice() {
        ["datasets", org, repo] => (RepoKind::Dataset, *org, *repo),
        ["models", org, repo] => (RepoKind::Model, *org, *repo),
        [kind @ ("datasets" | "models"), _] => {
            return Err(invalid(&format!(
                "names no repository; use hf://{kind}/ORG/REPO"
            )))
        }
        ["spaces", ..] => {
            return Err(invalid(
                "Spaces cannot be synced; use a model or dataset repository",
            ))
        }
        [org, repo] => (RepoKind::Model, *org, *repo),
        _ => {
            return Err(invalid(
                "not a Hub repository; use hf://ORG/REPO[@REV] or hf://datasets/ORG/REPO[@REV]",
            ))
        }
    };
    for part in [org, repo] {
        if !valid_name(part) {
            return Err(invalid(&format!(
                "{part:?} is not a Hub repository name (letters, digits, '-', '_', '.', at most {MAX_NAME})"
            )));
        }
    }
    Ok(HfUri {
        kind,
        org: org.to_string(),
        name: repo.to_string(),
        revision,
    })
}

/// The `rel="next"` target of a `Link` header (RFC 8288), as the Hub sends
/// it to page tree listings: `<URL>; rel="next"`, among other links.
fn next_link(header: &str) -> Option<&str> {
    let mut rest = header;
    loop {
        let open = rest.find('<')?;
        let close = open + rest[open..].find('>')?;
        let target = &rest[open + 1..close];
        // The link's parameters run to the next `<` (a URL may hold commas).
        let after = &rest[close + 1..];
        let params_end = after.find('<').unwrap_or(after.len());
        let is_next = after[..params_end].split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=").is_some_and(|v| {
                v.trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(target);
        }
        rest = &after[params_end..];
    }
}

#[derive(Deserialize)]
struct RevisionInfo {
    sha: String,
}

#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    /// The git blob id (SHA-1 of the blob): of the LFS pointer for an LFS
    /// file.
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    lfs: Option<LfsInfo>,
}

#[derive(Deserialize)]
struct LfsInfo {
    oid: String,
    size: u64,
}

/// A Hub repository at a revision.
pub struct HfSource {
    uri: String,
    repo: HfUri,
    endpoint: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl HfSource {
    pub fn new(uri: &str, opts: &SourceOptions) -> Result<Self, SyncError> {
        let repo = parse_hf_uri(uri)?;
        let endpoint = match std::env::var("HF_ENDPOINT") {
            Ok(e) if !e.trim().is_empty() => endpoint_url(uri, "HF_ENDPOINT", &e, &opts.net)?,
            _ => DEFAULT_ENDPOINT.to_string(),
        };
        Ok(HfSource {
            uri: uri.to_string(),
            repo,
            endpoint,
            token: bearer_token(uri, opts.secret.as_deref())?,
            http: http::client(uri, &opts.net)?,
        })
    }

    /// `ORG/REPO`, encoded for a URL path.
    fn repo_path(&self) -> String {
        format!("{}/{}", segment(&self.repo.org), segment(&self.repo.name))
    }

    fn api_url(&self, rest: &str) -> String {
        format!(
            "{}/api/{}/{}/{rest}",
            self.endpoint,
            self.repo.kind.api(),
            self.repo_path()
        )
    }

    fn resolve_url(&self, commit: &str, path: &str) -> String {
        format!(
            "{}/{}{}/resolve/{}/{}",
            self.endpoint,
            self.repo.kind.download_prefix(),
            self.repo_path(),
            segment(commit),
            path_segments(path)
        )
    }

    /// Sends a GET and turns anything but a 2xx into the job's error.
    async fn send(&self, url: &str, what: &str) -> Result<reqwest::Response, SyncError> {
        let req = http::get(&self.http, url, self.token.as_deref());
        http::send(req, &self.uri, what, |r| {
            let reason = r
                .header("x-error-message")
                .map(|m| http::first_line(&m))
                .unwrap_or_else(|| r.reason());
            self.hub_error(what, r.status, r.header("x-error-code").as_deref(), &reason)
        })
        .await
    }

    /// The Hub says why in `X-Error-Code`; without one, the status decides.
    fn hub_error(&self, what: &str, status: u16, code: Option<&str>, reason: &str) -> SyncError {
        let uri = &self.uri;
        match code {
            // The Hub answers 401 for a private repository and for one that
            // does not exist alike (not to tell which exist); the status is
            // what the job can act on: a token may open it.
            Some("RepoNotFound") => SyncError::new(
                if status == 401 {
                    ErrorKind::Denied
                } else {
                    ErrorKind::NotFound
                },
                if self.token.is_some() {
                    format!("{uri}: repository not found (or the token's account cannot read it)")
                } else {
                    format!("{uri}: repository not found (or private: set a token secret with `sealvol secret set`)")
                },
            ),
            Some("RevisionNotFound") => SyncError::new(
                ErrorKind::NotFound,
                format!(
                    "{uri}: revision {} not found on the Hub ({what})",
                    self.repo.revision
                ),
            ),
            Some("EntryNotFound") => SyncError::new(
                ErrorKind::NotFound,
                format!("{uri}: {what}: no such file in the repository"),
            ),
            Some("GatedRepo") => SyncError::new(
                ErrorKind::Denied,
                if self.token.is_some() {
                    format!("{uri}: gated repository: accept its conditions on the Hub with the token's account")
                } else {
                    format!("{uri}: gated repository: accept its conditions on the Hub and set that account's token as a secret")
                },
            ),
            _ => {
                let hint = match status {
                    401 | 403 if self.token.is_some() => "; the Hub refused the token secret",
                    401 | 403 => "; set a token secret with `sealvol secret set`",
                    429 => "; rate limited by the Hub",
                    _ => "",
                };
                let reason = if reason.is_empty() {
                    String::new()
                } else {
                    format!(" {reason}")
                };
                SyncError::from_status(
                    status,
                    format!("{uri}: {what}: HTTP {status}{reason}{hint}"),
                )
            }
        }
    }

    /// The commit `REV` names now.
    async fn resolve_commit(&self) -> Result<String, SyncError> {
        let rev = &self.repo.revision;
        let url = self.api_url(&format!("revision/{}", segment(rev)));
        let what = format!("revision {rev}");
        let body = self.read_body(&url, &what).await?;
        let info: RevisionInfo = self.parse(&what, &body)?;
        if info.sha.is_empty() {
            return Err(SyncError::new(
                ErrorKind::InvalidSource,
                format!("{}: {what}: the Hub gave no commit", self.uri),
            ));
        }
        Ok(info.sha)
    }

    async fn read_body(&self, url: &str, what: &str) -> Result<bytes::Bytes, SyncError> {
        let resp = self.send(url, what).await?;
        http::body(resp, &self.uri, what).await
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        body: &[u8],
    ) -> Result<T, SyncError> {
        http::json(&self.uri, what, &self.endpoint, body)
    }

    /// The next page's URL, only on the endpoint's own origin: the token
    /// goes with it.
    fn next_page(&self, current: &str, link: Option<&str>) -> Result<Option<String>, SyncError> {
        let Some(target) = link.and_then(next_link) else {
            return Ok(None);
        };
        let bad = |why: String| {
            SyncError::new(
                ErrorKind::InvalidSource,
                format!("{}: listing: {why}", self.uri),
            )
        };
        let base = url::Url::parse(current).map_err(|e| bad(e.to_string()))?;
        let next = base
            .join(target)
            .map_err(|e| bad(format!("bad next page {target:?}: {e}")))?;
        let home = url::Url::parse(&self.endpoint).map_err(|e| bad(e.to_string()))?;
        if next.origin() != home.origin() {
            return Err(bad(format!(
                "the next page {next} is not on {}",
                self.endpoint
            )));
        }
        Ok(Some(next.to_string()))
    }

    fn object(&self, commit: &str, e: TreeEntry) -> Result<Object, SyncError> {
        let (size, checksum) = match e.lfs {
            Some(lfs) => {
                let digest = hex::decode(&lfs.oid)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| {
                        SyncError::new(
                            ErrorKind::InvalidSource,
                            format!(
                                "{}: {}: the Hub gave an LFS oid that is not a SHA-256: {:?}",
                                self.uri, e.path, lfs.oid
                            ),
                        )
                    })?;
                (lfs.size, Some(Checksum::Sha256(digest)))
            }
            None => (e.size, None),
        };
        // Content hashes the Hub computes: the LFS SHA-256 (which the read
        // checks), else the git blob id. The same file in a later commit,
        // or another repository on this endpoint, has the same identity.
        let identity = match (&checksum, &e.oid) {
            (Some(c), _) => Some(format!("{c}:{size}")),
            (None, Some(oid)) if oid.len() == 40 && oid.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Some(format!("git:{}:{size}", oid.to_ascii_lowercase()))
            }
            _ => None,
        };
        Ok(Object {
            path: tree_path(&self.uri, &e.path, &e.path)?,
            key: e.path,
            size,
            checksum,
            mismatch_hint: None,
            version: Some(commit.to_string()),
            identity,
            mode: crate::FILE_MODE,
        })
    }
}

#[async_trait]
impl Source for HfSource {
    fn uri(&self) -> &str {
        &self.uri
    }

    /// Content hashes, computed by the Hub at this endpoint.
    fn reuse_scope(&self) -> Option<String> {
        Some(format!("hf@{}", self.endpoint))
    }

    fn pinned(&self, listed: &[Object]) -> Option<String> {
        let commit = listed.first()?.version.as_deref()?;
        (commit != self.repo.revision).then(|| {
            format!(
                "hf://{}{}/{}@{commit}",
                self.repo.kind.download_prefix(),
                self.repo.org,
                self.repo.name
            )
        })
    }

    async fn list(&self) -> Result<Vec<Object>, SyncError> {
        let commit = self.resolve_commit().await?;
        let mut url = Some(self.api_url(&format!("tree/{}?recursive=true", segment(&commit))));
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        while let Some(current) = url.take() {
            if !seen.insert(current.clone()) || seen.len() > MAX_PAGES {
                return Err(SyncError::new(
                    ErrorKind::InvalidSource,
                    format!(
                        "{}: listing: the Hub's pages do not end ({current})",
                        self.uri
                    ),
                ));
            }
            let what = format!("listing commit {commit}");
            let resp = self.send(&current, &what).await?;
            let link = http::header(resp.headers(), "link");
            let body = http::body(resp, &self.uri, &what).await?;
            let entries: Vec<TreeEntry> = self.parse(&what, &body)?;
            for e in entries {
                // Folders are implied by the files' paths.
                if e.kind == "file" {
                    out.push(self.object(&commit, e)?);
                }
            }
            url = self.next_page(&current, link.as_deref())?;
        }
        Ok(out)
    }

    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError> {
        let commit = object.version.as_deref().unwrap_or(&self.repo.revision);
        let url = self.resolve_url(commit, &object.key);
        let resp = self
            .send(&url, &object.key)
            .await
            .map_err(|e| match e.kind {
                // Listed at this commit a moment ago: the commit or the file is
                // gone (a force-push, a deleted repository) since.
                ErrorKind::NotFound => SyncError::new(
                    ErrorKind::Changed,
                    format!(
                        "{}: {} vanished after it was listed: the Hub no longer has it at commit {commit}",
                        self.uri, object.key
                    ),
                ),
                _ => e,
            })?;
        Ok(http::stream(resp, &self.uri, &object.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(uri: &str) -> HfSource {
        HfSource::new(uri, &SourceOptions::default()).unwrap()
    }

    #[test]
    fn a_branch_is_pinned_to_the_commit_listed() {
        let s = source("hf://datasets/org/data@main");
        let o = |v: Option<&str>| Object {
            path: "a".into(),
            key: "a".into(),
            size: 1,
            checksum: None,
            version: v.map(str::to_string),
            identity: None,
            mode: crate::FILE_MODE,
            mismatch_hint: None,
        };
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            s.pinned(&[o(Some(sha))]).as_deref(),
            Some(format!("hf://datasets/org/data@{sha}").as_str())
        );
        assert_eq!(s.pinned(&[]), None);
        let at_commit = source(&format!("hf://org/m@{sha}"));
        assert_eq!(at_commit.pinned(&[o(Some(sha))]), None, "already pinned");
    }

    #[test]
    fn uris_name_a_repository_and_a_revision() {
        let u = parse_hf_uri("hf://Qwen/Qwen3-0.6B").unwrap();
        assert_eq!(
            (u.kind, u.org.as_str(), u.name.as_str()),
            (RepoKind::Model, "Qwen", "Qwen3-0.6B")
        );
        assert_eq!(u.revision, "main");
        let u = parse_hf_uri("hf://datasets/org/data_set.v2@v1.0").unwrap();
        assert_eq!((u.kind, u.revision.as_str()), (RepoKind::Dataset, "v1.0"));
        assert_eq!(
            parse_hf_uri("hf://org/repo@refs/pr/1").unwrap().revision,
            "refs/pr/1"
        );
        assert_eq!(
            parse_hf_uri("hf://org/repo@refs%2Fpr%2F1")
                .unwrap()
                .revision,
            "refs/pr/1"
        );
        assert_eq!(
            parse_hf_uri("hf://models/org/repo").unwrap().kind,
            RepoKind::Model
        );
        for bad in [
            "hf://",
            "hf://gpt2",
            "hf://org/repo/extra",
            "hf://org/repo@",
            "hf://spaces/org/app",
            "hf://org/re po",
            "hf://org/-repo",
            "hf://org/a--b",
            "hf://org/a..b",
            "hf://org/repo?x=1",
            "hf://datasets/org",
            "s3://org/repo",
        ] {
            let e = parse_hf_uri(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidSource, "{bad}");
            assert!(e.message.starts_with(bad), "{bad}: {}", e.message);
        }
        assert!(parse_hf_uri(&format!("hf://org/{}", "a".repeat(97))).is_err());
    }

    #[test]
    fn urls_encode_their_segments() {
        let s = source("hf://org/repo@refs/pr/1");
        assert!(s
            .api_url("revision/x")
            .ends_with("/api/models/org/repo/revision/x"));
        assert_eq!(
            s.api_url(&format!("revision/{}", segment(&s.repo.revision))),
            format!("{}/api/models/org/repo/revision/refs%2Fpr%2F1", s.endpoint)
        );
        assert_eq!(
            s.resolve_url("abc", "dir/a b#?.json"),
            format!("{}/org/repo/resolve/abc/dir/a%20b%23%3F.json", s.endpoint)
        );
        let d = source("hf://datasets/org/repo");
        assert_eq!(
            d.resolve_url("abc", "x"),
            format!("{}/datasets/org/repo/resolve/abc/x", d.endpoint)
        );
        assert!(d
            .api_url("tree/abc")
            .contains("/api/datasets/org/repo/tree/abc"));
    }

    #[test]
    fn link_headers_give_the_next_page() {
        assert_eq!(
            next_link(
                r#"<https://huggingface.co/api/models/a/b/tree/c?recursive=true&cursor=ZX0=>; rel="next""#
            ),
            Some("https://huggingface.co/api/models/a/b/tree/c?recursive=true&cursor=ZX0=")
        );
        assert_eq!(
            next_link(r#"<http://h/p?a=1,2>; rel="prev", <http://h/q>; rel=next"#),
            Some("http://h/q")
        );
        assert_eq!(next_link(r#"<http://h/p>; rel="prev""#), None);
        assert_eq!(next_link(""), None);
        assert_eq!(next_link("garbage <unclosed"), None);
        assert_eq!(
            next_link(r#"<http://h/q>; title="x"; rel="last next""#),
            Some("http://h/q")
        );
    }

    #[test]
    fn next_pages_stay_on_the_endpoint() {
        let s = source("hf://org/repo");
        let here = format!("{}/api/models/org/repo/tree/abc?recursive=true", s.endpoint);
        let next = s
            .next_page(
                &here,
                Some(r#"</api/models/org/repo/tree/abc?cursor=1>; rel="next""#),
            )
            .unwrap();
        assert_eq!(
            next,
            Some(format!(
                "{}/api/models/org/repo/tree/abc?cursor=1",
                s.endpoint
            ))
        );
        assert_eq!(s.next_page(&here, None).unwrap(), None);
        let e = s
            .next_page(&here, Some(r#"<https://evil.example/x>; rel="next""#))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSource);
    }

    #[test]
    fn hub_error_codes_decide_the_kind() {
        let s = source("hf://org/repo");
        let e = s.hub_error("revision main", 401, Some("RepoNotFound"), "");
        assert_eq!(e.kind, ErrorKind::Denied);
        assert_eq!(
            s.hub_error("revision main", 404, Some("RepoNotFound"), "")
                .kind,
            ErrorKind::NotFound
        );
        assert!(
            e.message.starts_with("hf://org/repo: repository not found"),
            "{}",
            e.message
        );
        assert!(e.message.contains("sealvol secret set"), "{}", e.message);
        assert_eq!(
            s.hub_error("x", 404, Some("RevisionNotFound"), "").kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            s.hub_error("x", 404, Some("EntryNotFound"), "").kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            s.hub_error("x", 403, Some("GatedRepo"), "").kind,
            ErrorKind::Denied
        );
        assert_eq!(
            s.hub_error("x", 401, None, "Invalid credentials").kind,
            ErrorKind::Denied
        );
        assert_eq!(s.hub_error("x", 503, None, "").kind, ErrorKind::Transient);
        assert_eq!(s.hub_error("x", 429, None, "").kind, ErrorKind::Transient);
        assert_eq!(
            s.hub_error("x", 400, None, "").kind,
            ErrorKind::InvalidSource
        );
        let e = s.hub_error("config.json", 500, None, "boom");
        assert!(
            e.message.contains("config.json: HTTP 500 boom"),
            "{}",
            e.message
        );
        let with_token = HfSource::new(
            "hf://org/repo",
            &SourceOptions {
                secret: Some("hf_abc\n".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(with_token.token.as_deref(), Some("hf_abc"));
        assert!(with_token
            .hub_error("x", 401, Some("RepoNotFound"), "")
            .message
            .contains("token"));
    }

    #[test]
    fn unusable_tokens_are_invalid() {
        let e = HfSource::new(
            "hf://org/repo",
            &SourceOptions {
                secret: Some("a\nb".into()),
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidSource);
        assert!(!e.message.contains("a\nb"), "the secret must not be echoed");
    }

    #[test]
    fn entries_become_objects() {
        let s = source("hf://org/repo");
        let lfs: TreeEntry = serde_json::from_str(&format!(
            r#"{{"type":"file","oid":"x","size":5,"path":"m/w.bin","lfs":{{"oid":"{}","size":2048,"pointerSize":134}}}}"#,
            "ab".repeat(32)
        ))
        .unwrap();
        let o = s.object("c0ffee", lfs).unwrap();
        assert_eq!(
            (o.path.as_str(), o.key.as_str(), o.size),
            ("m/w.bin", "m/w.bin", 2048)
        );
        assert_eq!(o.checksum, Some(Checksum::Sha256([0xab; 32])));
        assert_eq!(o.version.as_deref(), Some("c0ffee"));
        assert_eq!(o.mode, crate::FILE_MODE);
        let small: TreeEntry =
            serde_json::from_str(r#"{"type":"file","oid":"x","size":12,"path":"a.json"}"#).unwrap();
        let o = s.object("c0ffee", small).unwrap();
        assert_eq!((o.size, o.checksum), (12, None));
        let bad: TreeEntry = serde_json::from_str(
            r#"{"type":"file","size":1,"path":"x","lfs":{"oid":"nothex","size":1}}"#,
        )
        .unwrap();
        assert_eq!(
            s.object("c", bad).unwrap_err().kind,
            ErrorKind::InvalidSource
        );
        let escaping: TreeEntry =
            serde_json::from_str(r#"{"type":"file","size":1,"path":"../x"}"#).unwrap();
        assert_eq!(
            s.object("c", escaping).unwrap_err().kind,
            ErrorKind::InvalidSource
        );
    }
}
