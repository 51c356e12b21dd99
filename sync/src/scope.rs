//! What a source URI reaches, for binding secrets to sources (SPEC.md
//! §8.3): a [`Scope`] is a scheme, the bucket, Hub organization or
//! registry host, a path of components below it, and the endpoint a
//! `?endpoint=` override names. A secret bound `--for s3://models/qwen`
//! covers `s3://models/qwen/base` but not `s3://models/qwen-evil` nor
//! `s3://models/qwen?endpoint=https://elsewhere`.
//!
//! Not where a source is opened or its URI checked in full: a `for` URI
//! may name less than a source does (a whole bucket, a Hub organization).

use crate::net::endpoint_origin;
use crate::{ErrorKind, SyncError};

/// What a source URI, or a secret's `for` URI, reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub scheme: String,
    /// Bucket, storage account, Hub organization or registry `host[:port]`.
    pub authority: String,
    /// Path components below it: key prefix, container and prefix, Hub
    /// repository, registry repository.
    pub path: Vec<String>,
    /// The `?endpoint=` override, as [`endpoint_origin`] writes it.
    pub endpoint: Option<String>,
}

impl Scope {
    /// The scope `uri` names; an error for a URI that names no place a
    /// credential could be sent (`dir://`) or that cannot be read.
    pub fn of(uri: &str) -> Result<Scope, SyncError> {
        let invalid = |why: &str| SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"));
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| invalid("not a source URI"))?;
        let scheme = scheme.to_ascii_lowercase();
        match scheme.as_str() {
            "s3" | "r2" | "cw" | "gs" | "azure" => {
                let p = crate::store::parse_uri(uri)?;
                let endpoint = match &p.endpoint {
                    None => None,
                    Some(e) => Some(endpoint_origin(e).ok_or_else(|| {
                        invalid(&format!("endpoint {e:?} is not an http:// or https:// URL"))
                    })?),
                };
                Ok(Scope {
                    scheme,
                    authority: p.authority,
                    path: components(&p.path),
                    endpoint,
                })
            }
            "hf" => {
                // `hf://[models/|datasets/]ORG[/REPO][@REV]`: the kind does
                // not change whose token it is, the revision neither.
                let name = rest.split_once('@').map_or(rest, |(n, _)| n);
                let mut parts = components(name);
                if matches!(
                    parts.first().map(String::as_str),
                    Some("models" | "datasets")
                ) {
                    parts.remove(0);
                }
                if parts.is_empty() {
                    return Err(invalid("names no Hub organization"));
                }
                let authority = parts.remove(0).to_ascii_lowercase();
                Ok(Scope {
                    scheme,
                    authority,
                    path: parts,
                    endpoint: None,
                })
            }
            "oci" => {
                let (host, repo) = rest.split_once('/').unwrap_or((rest, ""));
                if host.is_empty() {
                    return Err(invalid("names no registry host"));
                }
                let repo = repo.split_once('@').map_or(repo, |(r, _)| r);
                let mut path = components(repo);
                if let Some(last) = path.last_mut() {
                    if let Some((name, _tag)) = last.split_once(':') {
                        *last = name.to_string();
                    }
                }
                Ok(Scope {
                    scheme,
                    authority: host.to_ascii_lowercase(),
                    path,
                    endpoint: None,
                })
            }
            "dir" => Err(invalid(
                "a dir:// source reads the registry host's folders and takes no secret",
            )),
            other => Err(invalid(&format!(
                "unknown scheme {other}://; use hf, s3, r2, cw, gs, azure or oci"
            ))),
        }
    }

    /// Whether a secret bound to `self` may be sent to `source`: same
    /// scheme, authority and endpoint, and `self`'s path a prefix of the
    /// source's on component boundaries.
    pub fn covers(&self, source: &Scope) -> bool {
        self.scheme == source.scheme
            && self.authority == source.authority
            && self.endpoint == source.endpoint
            && source.path.starts_with(&self.path)
    }
}

fn components(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(bound: &str, source: &str) -> bool {
        Scope::of(bound)
            .unwrap()
            .covers(&Scope::of(source).unwrap())
    }

    #[test]
    fn paths_are_prefixes_on_component_boundaries() {
        assert!(covers("s3://models", "s3://models/qwen/base"));
        assert!(covers("s3://models/qwen", "s3://models/qwen/base"));
        assert!(covers("s3://models/qwen/", "s3://models/qwen"));
        assert!(!covers("s3://models/qwen", "s3://models/qwen-evil"));
        assert!(!covers("s3://models/qwen", "s3://models"));
        assert!(!covers("s3://models", "s3://other/qwen"));
        assert!(!covers("s3://models", "r2://models"));
        assert!(!covers("s3://models", "gs://models"));
        assert!(covers("azure://acct/c", "azure://acct/c/p"));
        assert!(!covers("azure://acct/c", "azure://acct/c2/p"));
    }

    #[test]
    fn endpoints_must_be_the_same() {
        assert!(!covers("s3://b", "s3://b?endpoint=https://elsewhere"));
        assert!(!covers("gs://b?endpoint=http://h:1", "gs://b"));
        assert!(covers(
            "s3://b?endpoint=HTTP://Minio:9000/",
            "s3://b/p?region=x&endpoint=http://minio:9000"
        ));
        assert!(!covers(
            "s3://b?endpoint=http://minio:9000",
            "s3://b?endpoint=http://minio:9001"
        ));
    }

    #[test]
    fn hub_organizations_and_registry_hosts() {
        assert!(covers("hf://Qwen", "hf://Qwen/Qwen3-0.6B@main"));
        assert!(covers("hf://qwen", "hf://datasets/Qwen/data"));
        assert!(covers(
            "hf://Qwen/Qwen3-0.6B",
            "hf://models/Qwen/Qwen3-0.6B"
        ));
        assert!(!covers("hf://Qwen/Qwen3", "hf://Qwen/Qwen3-0.6B"));
        assert!(!covers("hf://Qwen", "hf://evil/Qwen"));
        assert!(covers(
            "oci://reg.example:5000",
            "oci://reg.example:5000/w/x:prod"
        ));
        assert!(covers(
            "oci://reg.example/w",
            "oci://reg.example/w/x@sha256:ab"
        ));
        assert!(!covers("oci://reg.example", "oci://elsewhere/w/x:prod"));
        assert!(!covers("oci://reg.example/w/x", "oci://reg.example/w/xy:1"));
    }

    #[test]
    fn dir_sources_take_no_secret() {
        assert!(Scope::of("dir:///srv").is_err());
        assert!(Scope::of("nonsense").is_err());
    }
}
