//! What handlers take from a request, parsed once at the edge: the
//! caller the auth layer put in its extensions, and whole bodies read
//! within their limit.

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;

use crate::auth::Caller;
use crate::error::{Code, RegistryError, Result};
use crate::http::routes::{split_volume_path, RawSub};

/// The caller a handler runs for. A handler reached without the auth
/// layer (never in `sealvol serve`) gets an anonymous caller with no
/// rights, so a missing layer fails closed.
pub fn caller(req: &Request) -> Caller {
    caller_of(req.extensions())
}

fn caller_of(extensions: &axum::http::Extensions) -> Caller {
    extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::anonymous)
}

/// Handlers take the caller as an extractor.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> std::result::Result<Caller, Self::Rejection> {
        Ok(caller_of(&parts.extensions))
    }
}

/// A `/api/v1` JSON body (SPEC.md §7.3).
pub const MAX_API_BODY: usize = 64 << 10;
/// A `POST /token` form: a user name, a password and a few scopes.
pub const MAX_TOKEN_FORM: usize = 8 << 10;
/// The answer to a body over `max` bytes.
pub fn too_large(max: usize) -> RegistryError {
    RegistryError::with_status(
        Code::SizeInvalid,
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {max} bytes"),
    )
}

/// Reads a whole request body of at most `max` bytes. A body over the
/// limit is answered 413; one that stopped arriving (the server's
/// `[http] idle_timeout_seconds`) 408; one that broke off 400 with
/// `code`: each is the client's doing, never the server's.
pub async fn read_body(body: Body, max: usize, code: Code) -> Result<bytes::Bytes> {
    axum::body::to_bytes(body, max)
        .await
        .map_err(|e| body_error(&e, max, code))
}

/// What a failed read of a request body is answered with (see
/// [`read_body`]).
pub fn body_error(e: &(dyn std::error::Error + 'static), max: usize, code: Code) -> RegistryError {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return too_large(max);
        }
        if c.is::<tower_http::timeout::TimeoutError>() {
            return RegistryError::with_status(
                code,
                StatusCode::REQUEST_TIMEOUT,
                "the request body stopped arriving",
            );
        }
        cause = c.source();
    }
    RegistryError::new(code, format!("the request body broke off: {e}"))
}

/// A path parameter (`/api/v1/keys/{id}`, …), percent-decoded. One that
/// does not decode (not UTF-8) is the API's own `INVALID` error, not
/// axum's plain-text rejection.
pub(crate) struct Param(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = RegistryError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Param> {
        let Path(p) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| RegistryError::new(Code::Invalid, e.body_text()))?;
        Ok(Param(p))
    }
}

/// A volume's name from a path, checked once (SPEC.md §1.1:
/// `namespace/volume`, each component a name component).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VolumeName(pub(crate) String);

impl std::str::FromStr for VolumeName {
    type Err = RegistryError;
    fn from_str(name: &str) -> Result<VolumeName> {
        crate::service::volumes::check_volume_name(name)?;
        Ok(VolumeName(name.to_string()))
    }
}

impl std::ops::Deref for VolumeName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A version's digest in a path: `b3:<64 hex>` or `sha256:<64 hex>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VersionDigest(pub(crate) String);

impl VersionDigest {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for VersionDigest {
    type Err = RegistryError;
    fn from_str(d: &str) -> Result<VersionDigest> {
        check_digest(d)?;
        Ok(VersionDigest(d.to_string()))
    }
}

/// A full `b3:<64 hex>` or `sha256:<64 hex>`.
pub(crate) fn check_digest(d: &str) -> Result<()> {
    let ok = if let Some(hex) = d.strip_prefix("b3:") {
        hex.len() == 64
            && hex
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    } else {
        d.parse::<sealvol_spec::Sha256Digest>().is_ok()
    };
    if ok {
        Ok(())
    } else {
        Err(RegistryError::new(
            Code::Invalid,
            format!("{d:?} is not a full digest (b3:<64 hex> or sha256:<64 hex>)"),
        ))
    }
}

/// What follows a volume's name (after the `-` segment), typed.
#[derive(Debug)]
pub(crate) enum VolumeSub {
    Volume,
    Versions,
    Version(VersionDigest),
    Restore(VersionDigest),
    Entries(VersionDigest),
    Diff(VersionDigest, VersionDigest),
    Stats,
    Tag(sealvol_spec::Tag),
    Claim,
    ClaimToken(String),
}

/// `/api/v1/volumes/NAME[/-/…]`, parsed once: the name checked, digests
/// and tags typed. The split is [`split_volume_path`]'s, which the access
/// table uses too.
pub(crate) struct VolumePath {
    pub name: VolumeName,
    pub sub: VolumeSub,
}

impl<S: Send + Sync> FromRequestParts<S> for VolumePath {
    type Rejection = RegistryError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<VolumePath> {
        let Path(path) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| RegistryError::new(Code::Invalid, e.body_text()))?;
        let Some((name, raw)) = split_volume_path(&path) else {
            return Err(RegistryError::with_status(
                Code::Unsupported,
                StatusCode::NOT_FOUND,
                "no such endpoint",
            ));
        };
        let sub = match raw {
            RawSub::Volume => VolumeSub::Volume,
            RawSub::Versions => VolumeSub::Versions,
            RawSub::Version(d) => VolumeSub::Version(d.parse()?),
            RawSub::Restore(d) => VolumeSub::Restore(d.parse()?),
            RawSub::Entries(d) => VolumeSub::Entries(d.parse()?),
            RawSub::Diff(a, b) => VolumeSub::Diff(a.parse()?, b.parse()?),
            RawSub::Stats => VolumeSub::Stats,
            RawSub::Tag(t) => {
                VolumeSub::Tag(t.parse().map_err(|e: sealvol_spec::reference::RefError| {
                    RegistryError::new(Code::Invalid, e.to_string())
                })?)
            }
            RawSub::Claim => VolumeSub::Claim,
            RawSub::ClaimToken(t) => VolumeSub::ClaimToken(t),
        };
        Ok(VolumePath {
            name: name.parse()?,
            sub,
        })
    }
}

/// A repository name of the distribution spec (`/v2/NAME/...`), or
/// `NAME_INVALID`.
pub(crate) fn check_repository_name(name: &str) -> Result<()> {
    match name.parse::<sealvol_spec::reference::RepositoryName>() {
        Ok(_) => Ok(()),
        Err(_) => Err(RegistryError::new(
            Code::NameInvalid,
            format!("invalid repository name {name:?}"),
        )),
    }
}
