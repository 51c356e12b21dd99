//! `/hf`: sealed versions over the Hugging Face Hub API, read-only
//! (SPEC.md §9), so that `huggingface_hub` and everything built on it
//! (transformers, vLLM, `hf download`) load a volume with
//! `HF_ENDPOINT=https://REGISTRY/hf` and no sealvol code.
//!
//! It serves the three calls a download makes: a revision's info (its
//! commit id and files), a folder's listing, and a file's bytes
//! (`resolve`, `HEAD` and `GET` with `Range`). A repository id is a volume
//! name of two components, `NS/VOLUME`; a revision is `main` (the head), a
//! tag, a version digest or a prefix of one. The commit id the Hub's client
//! needs (40 hex digits) is the first 40 hex digits of the version digest,
//! which resolves back to the version as a prefix does (SPEC.md §1.3).
//!
//! Bytes come from [`crate::service::files`], checked piece by piece
//! against the version digest. Who may read is decided before any handler
//! runs, by the auth layer from [`crate::http::access::need`] (pull on the
//! volume), and its refusals are written in the Hub's dialect by
//! [`refusal`]; errors here too, so the client raises its own exceptions
//! (`RepositoryNotFoundError`, `RevisionNotFoundError`,
//! `EntryNotFoundError`). What it is not: an upload API, the Xet protocol
//! (no `X-Xet-*` header is sent, so clients take plain HTTP), datasets or
//! spaces, or a cache.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::reference::VolumeName;
use sealvol_spec::tree::{Entry, EntryData, TreeIndex};
use sealvol_spec::{B3Digest, DigestSelector, Selector};
use serde_json::{json, Value};

use crate::error::RegistryError;
use crate::http::oci::blobs::byte_range;
use crate::http::respond::{hv, Json};
use crate::http::routes::Hf;
use crate::service::files::{self, FileError, Resolved};
use crate::state::app::App;

/// The headers the Hub's client reads.
const X_REPO_COMMIT: &str = "x-repo-commit";
const X_ERROR_CODE: &str = "x-error-code";
const X_ERROR_MESSAGE: &str = "x-error-message";
/// The version digest a `resolve` answer came from: a client that asked
/// for a tag can pin what it got.
const X_SEALVOL_VERSION: &str = "x-sealvol-version";

/// The one handler behind every `/hf` path.
pub async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    let head = req.method() == Method::HEAD;
    let result = match crate::http::routes::hf(req.uri().path()) {
        None => Err(HubError::new(
            StatusCode::NOT_FOUND,
            None,
            "no such endpoint",
        )),
        Some(_) if !head && req.method() != Method::GET => Err(HubError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            "the Hub gateway is read-only: GET and HEAD only",
        )),
        Some(Hf::Info { name, revision }) => info(&app, &name, revision.as_deref()).await,
        Some(Hf::Tree {
            name,
            revision,
            path,
        }) => {
            let recursive = crate::http::query::flag(req.uri().query(), "recursive")
                || crate::http::query::param(req.uri().query(), "recursive")
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            tree(&app, &name, &revision, &path, recursive).await
        }
        Some(Hf::Resolve {
            name,
            revision,
            path,
        }) => resolve(&app, &name, &revision, &path, req.headers(), head).await,
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// The commit id the Hub's client keeps for version `d`: its first 40 hex
/// digits (SPEC.md §9.2).
pub fn commit_id(d: &B3Digest) -> String {
    d.hex()[..40].to_string()
}

/// What a revision names (SPEC.md §9.2): `main` or `head` the head; a
/// version digest, or 40 to 64 lower-case hex digits of one (the commit
/// ids this gateway hands out); anything else a tag. Shorter hex is taken
/// for a tag, as the Hub would, so a tag may look like a short hash.
pub fn selector(revision: &str) -> Result<Selector, HubError> {
    let not_found = || {
        HubError::new(
            StatusCode::NOT_FOUND,
            Some("RevisionNotFound"),
            format!("invalid revision {revision:?}: main, a tag, or a version digest"),
        )
    };
    if revision == "main" || revision == "head" {
        return Ok(Selector::Head);
    }
    let hex = revision.strip_prefix("b3:");
    let bare = hex.unwrap_or(revision);
    let is_hex = bare.len() <= 64 && bare.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if hex.is_some() || (is_hex && bare.len() >= 40) {
        return revision
            .parse::<DigestSelector>()
            .map(Selector::Digest)
            .map_err(|_| not_found());
    }
    revision.parse().map(Selector::Tag).map_err(|_| not_found())
}

/// The volume a repository id names: two components only, as the Hub's
/// ids are (`namespace/name`).
fn volume(name: &str) -> Result<String, HubError> {
    match name.parse::<VolumeName>() {
        Ok(n) if n.as_str().split('/').count() == 2 => Ok(n.as_str().to_string()),
        _ => Err(HubError::new(
            StatusCode::NOT_FOUND,
            Some("RepoNotFound"),
            format!(
                "{name:?} is not a volume the Hub gateway serves: only NAMESPACE/VOLUME names are"
            ),
        )),
    }
}

async fn find(app: &App, name: &str, revision: &str) -> Result<(String, Resolved), HubError> {
    let repo = volume(name)?;
    let found = files::resolve(app, &repo, &selector(revision)?).await?;
    Ok((repo, found))
}

/// `GET /hf/api/models/NS/VOLUME[/revision/REV]`: what `repo_info` and
/// `model_info` read; `snapshot_download` takes the `sha`.
async fn info(app: &App, name: &str, revision: Option<&str>) -> Result<Response, HubError> {
    let (repo, found) = find(app, name, revision.unwrap_or("main")).await?;
    let sha = commit_id(&found.digest);
    let siblings: Vec<Value> = found
        .tree
        .entries()
        .iter()
        .filter_map(|e| match &e.data {
            EntryData::File { size, .. } => Some(json!({"rfilename": e.path, "size": size})),
            _ => None,
        })
        .collect();
    let namespace = repo.split('/').next().unwrap_or_default();
    Ok(Json(json!({
        "_id": sha,
        "id": repo,
        "modelId": repo,
        "author": namespace,
        "sha": sha,
        "lastModified": found.created_at,
        "createdAt": found.created_at,
        "private": false,
        "disabled": false,
        "gated": false,
        "tags": [],
        "downloads": 0,
        "likes": 0,
        "siblings": siblings,
        "sealvolVersion": found.digest.to_string(),
    }))
    .into_response())
}

/// `GET /hf/api/models/NS/VOLUME/tree/REV[/PATH]`: a folder's files and
/// folders, or with `recursive` everything beneath it, in one page.
/// Symlinks are not listed: the Hub has none.
async fn tree(
    app: &App,
    name: &str,
    revision: &str,
    path: &str,
    recursive: bool,
) -> Result<Response, HubError> {
    let (_, found) = find(app, name, revision).await?;
    let sha = commit_id(&found.digest);
    let listing = listing(&found.tree, path, recursive, &sha)
        .ok_or_else(|| HubError::entry_not_found(path, &sha))?;
    Ok(Json(Value::Array(listing)).into_response())
}

/// The tree endpoint's entries under `dir` ("" for the root); `None` when
/// `dir` is not a folder of the version.
fn listing(tree: &TreeIndex, dir: &str, recursive: bool, sha: &str) -> Option<Vec<Value>> {
    let dir = (!dir.is_empty()).then_some(dir);
    if let Some(d) = dir {
        if !tree.get(d)?.is_dir() {
            return None;
        }
    }
    let entry = |e: &Entry| match &e.data {
        EntryData::File { size, blake3, .. } => Some(json!({
            "type": "file",
            // A git blob id is 40 hex digits; the file's BLAKE3 names
            // its content as one does.
            "oid": blake3.hex()[..40],
            "size": size,
            "path": e.path,
        })),
        // A folder's git tree id has no counterpart: the commit's.
        EntryData::Dir => Some(json!({"type": "directory", "oid": sha, "size": 0, "path": e.path})),
        EntryData::Symlink { .. } => None,
    };
    Some(if recursive {
        let under = match dir {
            Some(d) => tree.subtree(Some(d)).get(1..).unwrap_or(&[]),
            None => tree.entries(),
        };
        under.iter().filter_map(entry).collect()
    } else {
        tree.children(dir).filter_map(entry).collect()
    })
}

/// `HEAD` and `GET /hf/NS/VOLUME/resolve/REV/PATH`: a file's metadata and
/// bytes, whole or one range, verified as they are read.
async fn resolve(
    app: &App,
    name: &str,
    revision: &str,
    path: &str,
    headers: &HeaderMap,
    head: bool,
) -> Result<Response, HubError> {
    let (_, found) = find(app, name, revision).await?;
    let sha = commit_id(&found.digest);
    let file = match files::file(&found.tree, path) {
        Ok(f) => f,
        Err(FileError::PathUnknown(_)) => return Err(HubError::entry_not_found(path, &sha)),
        Err(e) => return Err(e.into()),
    };
    let size = file.size;
    let (status, range) = match byte_range(headers, size) {
        Ok(None) => (StatusCode::OK, 0..size),
        Ok(Some((start, end))) => (StatusCode::PARTIAL_CONTENT, start..end + 1),
        Err(()) => {
            return Err(HubError {
                size: Some(size),
                ..HubError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    None,
                    format!("{path}: the range asked for lies outside its {size} bytes"),
                )
            })
        }
    };
    let etag = format!("\"{}\"", file.blake3.hex());
    let len = range.end - range.start;
    let body = if head {
        Body::empty()
    } else {
        let blobs = Arc::clone(&app.blobs);
        Body::from_stream(files::open(blobs, Arc::new(file), range.clone()).await?)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, hv(&len.to_string()));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::ETAG, hv(&etag));
    h.insert(X_REPO_COMMIT, hv(&sha));
    h.insert(X_SEALVOL_VERSION, hv(&found.digest.to_string()));
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(
            header::CONTENT_RANGE,
            hv(&format!("bytes {}-{}/{size}", range.start, range.end - 1)),
        );
    }
    Ok(resp)
}

/// An answer in the Hub's dialect: a status, the `X-Error-Code` its client
/// turns into an exception, and the message (header and `{"error"}`).
#[derive(Debug)]
pub struct HubError {
    status: StatusCode,
    code: Option<&'static str>,
    message: String,
    /// The commit of a revision that resolved (a missing file's answer
    /// carries it, and the client remembers the file is absent there).
    commit: Option<String>,
    /// The size of a file a range lay outside of.
    size: Option<u64>,
}

impl HubError {
    fn new(status: StatusCode, code: Option<&'static str>, message: impl Into<String>) -> Self {
        HubError {
            status,
            code,
            message: message.into(),
            commit: None,
            size: None,
        }
    }

    fn entry_not_found(path: &str, sha: &str) -> Self {
        HubError {
            commit: Some(sha.to_string()),
            ..HubError::new(
                StatusCode::NOT_FOUND,
                Some("EntryNotFound"),
                format!("{path}: no such file in this revision"),
            )
        }
    }
}

impl From<FileError> for HubError {
    fn from(e: FileError) -> Self {
        let message = e.to_string();
        match e {
            FileError::VolumeUnknown(_) => {
                HubError::new(StatusCode::NOT_FOUND, Some("RepoNotFound"), message)
            }
            FileError::VersionUnknown { .. } => {
                HubError::new(StatusCode::NOT_FOUND, Some("RevisionNotFound"), message)
            }
            FileError::PathUnknown(_) => {
                HubError::new(StatusCode::NOT_FOUND, Some("EntryNotFound"), message)
            }
            FileError::RangeNotSatisfiable { size, .. } => HubError {
                size: Some(size),
                ..HubError::new(StatusCode::RANGE_NOT_SATISFIABLE, None, message)
            },
            FileError::Corrupt { .. } | FileError::Unverifiable(_) => {
                tracing::error!("{message}");
                HubError::new(StatusCode::INTERNAL_SERVER_ERROR, None, message)
            }
            FileError::Registry(e) => e.into(),
        }
    }
}

impl From<RegistryError> for HubError {
    fn from(e: RegistryError) -> Self {
        let status = e.status();
        let message = match e {
            RegistryError::Internal(m) => {
                tracing::error!("{m}");
                "internal error; the registry's log says more".to_string()
            }
            RegistryError::Damaged(m) => {
                tracing::error!("{m}");
                m
            }
            other => other.to_string(),
        };
        HubError::new(status, None, message)
    }
}

impl IntoResponse for HubError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.message}).to_string();
        let mut resp = (self.status, body).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(code) = self.code {
            h.insert(X_ERROR_CODE, HeaderValue::from_static(code));
        }
        // A header holds visible ASCII only; the body has the message whole.
        let ascii: String = (self.message.chars())
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .take(512)
            .collect();
        h.insert(X_ERROR_MESSAGE, hv(&ascii));
        if let Some(sha) = &self.commit {
            h.insert(X_REPO_COMMIT, hv(sha));
        }
        if let Some(size) = self.size {
            h.insert(header::CONTENT_RANGE, hv(&format!("bytes */{size}")));
        }
        resp
    }
}

/// Why the auth layer refused a `/hf` request, for [`refusal`].
pub enum Refused {
    /// Credentials that do not check out.
    BadCredentials,
    /// No credentials, where the policy wants some.
    Anonymous,
    /// Credentials of someone who may not pull the volume.
    Forbidden,
}

/// The auth layer's refusal of a `/hf` request in the Hub's dialect: the
/// Hub answers a repository the caller may not see as one that does not
/// exist (`RepoNotFound`), 401 without credentials and 403 here with
/// them, and bad credentials with the message its client recognises.
pub fn refusal(why: Refused, message: &str) -> Response {
    let (status, code, message) = match why {
        Refused::BadCredentials => (
            StatusCode::UNAUTHORIZED,
            None,
            // The client's words for it (`hf_raise_for_status`).
            "Invalid credentials in Authorization header".to_string(),
        ),
        Refused::Anonymous => (
            StatusCode::UNAUTHORIZED,
            Some("RepoNotFound"),
            format!("{message}; set HF_TOKEN to an API key's id:secret"),
        ),
        Refused::Forbidden => (
            StatusCode::FORBIDDEN,
            Some("RepoNotFound"),
            message.to_string(),
        ),
    };
    HubError::new(status, code, message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_name_the_head_digests_prefixes_or_tags() {
        let d = B3Digest::of(b"v");
        assert_eq!(selector("main").unwrap(), Selector::Head);
        assert_eq!(selector("head").unwrap(), Selector::Head);
        assert_eq!(
            selector(&d.to_string()).unwrap(),
            Selector::Digest(DigestSelector::B3(d))
        );
        assert_eq!(
            selector(&d.hex()).unwrap(),
            Selector::Digest(DigestSelector::B3(d))
        );
        // The commit id this gateway hands out resolves as a prefix.
        assert_eq!(
            selector(&commit_id(&d)).unwrap(),
            Selector::Digest(DigestSelector::B3Prefix(d.hex()[..40].to_string()))
        );
        assert_eq!(commit_id(&d).len(), 40);
        assert_eq!(
            selector("prod").unwrap(),
            Selector::Tag("prod".parse().unwrap())
        );
        // Short hex is a tag name, as on the Hub.
        assert_eq!(
            selector("deadbeef").unwrap(),
            Selector::Tag("deadbeef".parse().unwrap())
        );
        for bad in ["b3:XYZ", "b3:", "", "a/b", "-x"] {
            let e = selector(bad).unwrap_err();
            assert_eq!(e.code, Some("RevisionNotFound"), "{bad}");
        }
    }

    #[test]
    fn only_two_component_names_are_repositories() {
        assert_eq!(volume("w/q").unwrap(), "w/q");
        for bad in ["w/q/r", "w", "W/q", "w//q"] {
            let e = volume(bad).unwrap_err();
            assert_eq!(e.code, Some("RepoNotFound"), "{bad}");
        }
    }

    #[test]
    fn listings_show_files_and_folders_not_symlinks() {
        let e = |path: &str, data: EntryData| Entry {
            path: path.into(),
            mode: 0o644,
            data,
        };
        let tree = TreeIndex::new(
            Default::default(),
            vec![
                e("a.json", EntryData::file_of(b"{}", &[])),
                e("d", EntryData::Dir),
                e("d/x", EntryData::file_of(b"xx", &[])),
                e("d/e", EntryData::Dir),
                e("d/e/y", EntryData::file_of(b"y", &[])),
                e(
                    "l",
                    EntryData::Symlink {
                        target: "a.json".into(),
                    },
                ),
            ],
        )
        .unwrap();
        let paths = |v: Vec<Value>| -> Vec<String> {
            v.iter()
                .map(|e| {
                    format!(
                        "{}:{}",
                        e["type"].as_str().unwrap(),
                        e["path"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let sha = "0".repeat(40);
        assert_eq!(
            paths(listing(&tree, "", false, &sha).unwrap()),
            ["file:a.json", "directory:d"]
        );
        let mut all = paths(listing(&tree, "", true, &sha).unwrap());
        all.sort();
        assert_eq!(
            all,
            [
                "directory:d",
                "directory:d/e",
                "file:a.json",
                "file:d/e/y",
                "file:d/x"
            ]
        );
        let mut under = paths(listing(&tree, "d", true, &sha).unwrap());
        under.sort();
        assert_eq!(under, ["directory:d/e", "file:d/e/y", "file:d/x"]);
        assert!(listing(&tree, "a.json", false, &sha).is_none());
        assert!(listing(&tree, "nope", false, &sha).is_none());
        let files = listing(&tree, "d/e", false, &sha).unwrap();
        assert_eq!(files[0]["size"], 1);
        assert_eq!(files[0]["oid"].as_str().unwrap().len(), 40);
    }
}
