//! Refs: what a user types to name a volume, a version and a path in it
//! (SPEC.md §1).
//!
//! ```
//! use sealvol_spec::reference::{Selector, VolumeRef};
//! let r: VolumeRef = "bdn:weights/llama:prod/config/model.json".parse().unwrap();
//! assert_eq!(r.repository(), "weights/llama");
//! assert_eq!(r.selector, Selector::Tag("prod".parse().unwrap()));
//! assert_eq!(r.path.as_deref(), Some("config/model.json"));
//! assert_eq!(r.to_string(), "bdn:weights/llama:prod/config/model.json");
//! ```

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::digest::{DigestError, DigestSelector};
use crate::path::{normalize_ref_path, PathError};

/// The scheme of short refs resolved against the default registry.
pub const SCHEME: &str = "bdn:";
/// Environment variable naming the default registry.
pub const REGISTRY_ENV: &str = "SEALVOL_REGISTRY";
/// The default registry when [`REGISTRY_ENV`] is unset: the embedded one.
pub const DEFAULT_REGISTRY: &str = "127.0.0.1:5000";
/// Longest repository name (`namespace/volume`) accepted, as most OCI clients.
pub const MAX_NAME_LEN: usize = 255;
/// The tag name reserved for a volume's newest version.
pub const HEAD: &str = "head";

/// Why a ref was rejected. Each message says what a valid ref looks like.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RefError {
    #[error("{0:?} is not a volume ref: write bdn:<namespace>/<volume>[:tag|@digest][/path] or <host>[:port]/<namespace>/<volume>[:tag|@digest]")]
    Shape(String),
    #[error("{component:?} in {input:?} is not a valid name component: use lower-case letters and digits, separated by '.', '_', '__' or dashes")]
    Component { input: String, component: String },
    #[error("repository name in {0:?} is longer than 255 characters")]
    NameTooLong(String),
    #[error("{0:?} is not a valid tag: 1 to 128 characters of [A-Za-z0-9_.-], not starting with '.' or '-'")]
    Tag(String),
    #[error("{0:?} is reserved: tags of the form b3-<64 hex> name versions by digest")]
    ReservedTag(String),
    #[error("{0:?} is not a valid registry host: write host[:port]")]
    Host(String),
    #[error(transparent)]
    Digest(#[from] DigestError),
    #[error("path in ref: {0}")]
    Path(#[from] PathError),
}

/// A validated tag (OCI tag grammar, SPEC.md §1.4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(String);

impl Tag {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tag that names a version by its digest on any registry
    /// (SPEC.md §5.3): `b3-<64 hex>`.
    pub fn for_digest(d: &crate::B3Digest) -> Tag {
        Tag(format!("b3-{}", d.hex()))
    }

    /// True for the `b3-<hex>` tags of [`Tag::for_digest`].
    pub fn is_digest_tag(&self) -> bool {
        self.0.len() == 67
            && self.0.starts_with("b3-")
            && self.0[3..]
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    }

    /// Parses a tag a user may set: every valid OCI tag except the
    /// reserved `b3-<hex>` digest tags.
    pub fn parse_user(s: &str) -> Result<Tag, RefError> {
        let tag: Tag = s.parse()?;
        if tag.is_digest_tag() {
            return Err(RefError::ReservedTag(s.to_string()));
        }
        Ok(tag)
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Tag {
    type Err = RefError;
    fn from_str(s: &str) -> Result<Tag, RefError> {
        let b = s.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 128
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b[1..]
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if ok {
            Ok(Tag(s.to_string()))
        } else {
            Err(RefError::Tag(s.to_string()))
        }
    }
}

/// Which version of a volume a ref names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Selector {
    /// No selector: the volume's newest version.
    Head,
    Tag(Tag),
    Digest(DigestSelector),
}

/// A parsed ref (SPEC.md §1.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VolumeRef {
    /// `None` for `bdn:` refs, which resolve against the default registry.
    pub registry: Option<String>,
    /// One component in `bdn:` refs; one or more in qualified refs.
    pub namespace: String,
    pub volume: String,
    pub selector: Selector,
    /// A normalized path inside the version (no leading or trailing `/`).
    pub path: Option<String>,
}

impl VolumeRef {
    /// `namespace/volume`: the OCI repository name.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.namespace, self.volume)
    }

    /// The registry this ref lives on: its own, or `default`.
    pub fn registry_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.registry.as_deref().unwrap_or(default)
    }

    /// The default registry: `$SEALVOL_REGISTRY`, else [`DEFAULT_REGISTRY`].
    pub fn default_registry() -> String {
        std::env::var(REGISTRY_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_REGISTRY.to_string())
    }

    /// The same ref without its path.
    pub fn without_path(&self) -> VolumeRef {
        VolumeRef {
            path: None,
            ..self.clone()
        }
    }

    /// The same volume with another selector and no path.
    pub fn with_selector(&self, selector: Selector) -> VolumeRef {
        VolumeRef {
            selector,
            path: None,
            ..self.clone()
        }
    }
}

impl fmt::Display for VolumeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.registry {
            None => write!(f, "{SCHEME}{}/{}", self.namespace, self.volume)?,
            Some(host) => write!(f, "{host}/{}/{}", self.namespace, self.volume)?,
        }
        match &self.selector {
            Selector::Head => {}
            Selector::Tag(t) => write!(f, ":{t}")?,
            Selector::Digest(d) => write!(f, "@{d}")?,
        }
        if let Some(p) = &self.path {
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

/// OCI distribution name component: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
pub fn is_name_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator run: ".", "_", "__" or one or more "-".
        let start = i;
        let sep = b[i];
        while i < b.len() && b[i] == sep {
            i += 1;
        }
        let run = i - start;
        let ok = match sep {
            b'.' => run == 1,
            b'_' => run <= 2,
            b'-' => true,
            _ => false,
        };
        // A separator run is always followed by an alphanumeric.
        if !ok || !alnum(b[i]) {
            return false;
        }
    }
    true
}

fn is_host(s: &str) -> bool {
    let (name, port) = match s.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (s, None),
    };
    let name_ok = !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|c| c.is_ascii_digit()));
    name_ok && port_ok
}

/// Parses what follows a name: "" or `:tag[/path]` or `@digest[/path]`.
fn parse_tail(tail: &str) -> Result<(Selector, Option<String>), RefError> {
    let Some(kind) = tail.chars().next() else {
        return Ok((Selector::Head, None));
    };
    let (sel, path) = match tail[1..].split_once('/') {
        Some((s, p)) => (s, normalize_ref_path(p)?),
        None => (&tail[1..], None),
    };
    let selector = if kind == ':' {
        Selector::Tag(sel.parse()?)
    } else {
        Selector::Digest(sel.parse()?)
    };
    Ok((selector, path))
}

/// A repository name of the distribution spec (`/v2/<name>/...`): name
/// components ([`is_name_component`]) joined by `/`, at most
/// [`MAX_NAME_LEN`] bytes. Parsed once where a name comes in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepositoryName(String);

impl RepositoryName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RepositoryName {
    type Err = RefError;

    fn from_str(name: &str) -> Result<RepositoryName, RefError> {
        check_components(name, name)?;
        Ok(RepositoryName(name.to_string()))
    }
}

impl fmt::Display for RepositoryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A volume's name (SPEC.md §1.1): a [`RepositoryName`] of at least two
/// components, `namespace/volume[/...]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeName(String);

impl VolumeName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first component.
    pub fn namespace(&self) -> &str {
        self.0.split('/').next().unwrap_or_default()
    }
}

impl FromStr for VolumeName {
    type Err = RefError;

    fn from_str(name: &str) -> Result<VolumeName, RefError> {
        let repo: RepositoryName = name.parse()?;
        if !repo.0.contains('/') {
            return Err(RefError::Shape(name.to_string()));
        }
        Ok(VolumeName(repo.0))
    }
}

impl fmt::Display for VolumeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_components(input: &str, name: &str) -> Result<(), RefError> {
    if name.len() > MAX_NAME_LEN {
        return Err(RefError::NameTooLong(input.to_string()));
    }
    for c in name.split('/') {
        if !is_name_component(c) {
            return Err(RefError::Component {
                input: input.to_string(),
                component: c.to_string(),
            });
        }
    }
    Ok(())
}

impl FromStr for VolumeRef {
    type Err = RefError;

    fn from_str(input: &str) -> Result<VolumeRef, RefError> {
        let shape = || RefError::Shape(input.to_string());
        if let Some(rest) = input.strip_prefix(SCHEME) {
            let (namespace, rest) = rest.split_once('/').ok_or_else(shape)?;
            // The volume ends at a selector or at the start of a path.
            let vol_end = rest.find([':', '@', '/']).unwrap_or(rest.len());
            let (volume, tail) = rest.split_at(vol_end);
            let (selector, path) = match tail.strip_prefix('/') {
                Some(p) => (Selector::Head, normalize_ref_path(p)?),
                None => parse_tail(tail)?,
            };
            check_components(input, &format!("{namespace}/{volume}"))?;
            return Ok(VolumeRef {
                registry: None,
                namespace: namespace.to_string(),
                volume: volume.to_string(),
                selector,
                path,
            });
        }
        let (host, rest) = input.split_once('/').ok_or_else(shape)?;
        if !(host.contains('.') || host.contains(':') || host == "localhost") {
            return Err(shape());
        }
        if !is_host(host) {
            return Err(RefError::Host(host.to_string()));
        }
        // Name components never hold ':' or '@', so the first one starts the
        // selector; without a selector the whole rest is the name.
        let (name, tail) = rest.split_at(rest.find([':', '@']).unwrap_or(rest.len()));
        let (selector, path) = parse_tail(tail)?;
        check_components(input, name)?;
        let (namespace, volume) = name.rsplit_once('/').ok_or_else(shape)?;
        Ok(VolumeRef {
            registry: Some(host.to_string()),
            namespace: namespace.to_string(),
            volume: volume.to_string(),
            selector,
            path,
        })
    }
}

/// Whether a registry (`host[:port]`, `[v6]:port`) is on this machine:
/// `localhost` or a loopback address. Clients speak plain HTTP to it and
/// HTTPS to anything else; a name merely starting with `127.` is not it.
pub fn is_loopback_host(registry: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let host = match registry.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => match rest.split_once(']') {
            Some((h, "")) => h,
            Some((h, tail)) if tail.strip_prefix(':').is_some_and(digits) => h,
            _ => return false,
        },
        None => registry
            .rsplit_once(':')
            .filter(|(_, port)| digits(port))
            .map_or(registry, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_components() {
        for ok in ["a", "qwen3-8b", "a.b", "a__b", "a--b", "a_b"] {
            assert!(is_name_component(ok), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a___b", "a/b", "a:b", "a._b"] {
            assert!(!is_name_component(bad), "{bad}");
        }
    }

    #[test]
    fn forms() {
        let r: VolumeRef = "bdn:weights/qwen3-8b".parse().unwrap();
        assert_eq!(r.selector, Selector::Head);
        assert_eq!(r.registry, None);
        let r: VolumeRef = "bdn:weights/qwen3-8b/config".parse().unwrap();
        assert_eq!(r.path.as_deref(), Some("config"));
        let r: VolumeRef = "localhost:5000/a/b/c@b3:0123456789ab/x/y".parse().unwrap();
        assert_eq!(r.namespace, "a/b");
        assert_eq!(r.volume, "c");
        assert_eq!(r.registry.as_deref(), Some("localhost:5000"));
        assert_eq!(r.path.as_deref(), Some("x/y"));
        assert!(
            "weights/qwen".parse::<VolumeRef>().is_err(),
            "no host, no scheme"
        );
        assert!("bdn:weights".parse::<VolumeRef>().is_err());
        assert!("bdn:Weights/x".parse::<VolumeRef>().is_err());
        assert!("bdn:w/x:".parse::<VolumeRef>().is_err());
        assert!("bdn:w/x@b3:00".parse::<VolumeRef>().is_err());
        assert!("bdn:w/x:prod/../etc".parse::<VolumeRef>().is_err());
        assert!(Tag::parse_user(&format!("b3-{}", "0".repeat(64))).is_err());
    }

    #[test]
    fn repository_and_volume_names() {
        assert!("a".parse::<RepositoryName>().is_ok());
        assert!("a/b-c/d".parse::<RepositoryName>().is_ok());
        assert!("A".parse::<RepositoryName>().is_err());
        assert!("a//b".parse::<RepositoryName>().is_err());
        assert!("a".repeat(256).parse::<RepositoryName>().is_err());
        let v: VolumeName = "weights/qwen3-8b".parse().unwrap();
        assert_eq!(v.namespace(), "weights");
        assert_eq!(v.to_string(), "weights/qwen3-8b");
        assert!("weights".parse::<VolumeName>().is_err());
        assert!("weights/".parse::<VolumeName>().is_err());
        assert!("-/x".parse::<VolumeName>().is_err());
    }
}
