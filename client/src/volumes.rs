//! The registry volume API's endpoints (SPEC.md §7) from the client side: a
//! volume's history (versions alive and deleted), deleting and restoring
//! versions, tag and volume expiry and garbage collection, over the same
//! [`Remote`] the OCI calls use, and what their refusals mean to a user
//! (`Ctx`). Sending, decoding and asking whether a registry has the API
//! are [`crate::api`]'s; push claims are [`crate::claim`]'s.
//!
//! Only a registry that knows volumes (`sealvol serve`) has this API; any
//! other answers 404 under `/api/v1`, [`crate::api::supported`] says `false`, and every
//! call here fails with one line naming the registry and what it cannot
//! do. It is not the OCI view: pushing, pulling and reading go through
//! [`crate::push`], [`crate::pull`] and [`crate::inspect`], which work on
//! every registry and use this module only where the API adds something
//! (a push claim, a listing with deleted versions, tag expiry).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sealvol_client::Error> {
//! use sealvol_client::{volumes, Remote};
//! let remote = Remote::connect("127.0.0.1:5000", false)?;
//! let volume: sealvol_spec::reference::VolumeRef = "bdn:weights/llama".parse().unwrap();
//! for v in volumes::versions(&remote, &volume, true).await? {
//!     println!("{} {} {}", v.sequence, v.digest, v.lifecycle);
//! }
//! # Ok(()) }
//! ```

use std::time::SystemTime;

use reqwest::Method;
use sealvol_spec::api::{self as wire, ErrorCode};
use sealvol_spec::reference::{Selector, Tag, VolumeRef};
use sealvol_spec::{B3Digest, DigestSelector};

use crate::api::{
    decode, error_code, get, human_seconds, one_line, other_failure, require, segment, send,
    to_body, CallCtx,
};
use crate::remote::Remote;
use crate::resolve::display_ref;
use crate::{Error, TransportError};

/// The bodies of SPEC.md §7.3, one definition shared with the registry.
pub use sealvol_spec::api::{
    ApiInfo, Claim, GcReport, Head, Lifecycle, TagInfo, Version, Volume, API,
};

/// `GET /api/v1/namespaces`.
pub async fn namespaces(remote: &Remote) -> Result<Vec<String>, Error> {
    let info = require(remote, Op::Namespaces.what()).await?;
    let ctx = Ctx::registry(remote, Op::Namespaces, &info);
    let a: wire::NamespaceList = get(remote, &ctx, "/namespaces", None).await?;
    Ok(a.namespaces)
}

/// `GET /api/v1/volumes[?namespace=NS]`: volumes by name.
pub async fn list_volumes(remote: &Remote, namespace: Option<&str>) -> Result<Vec<Volume>, Error> {
    let info = require(remote, Op::Volumes.what()).await?;
    let ctx = Ctx::registry(remote, Op::Volumes, &info);
    let path = match namespace {
        Some(ns) => format!("/volumes?namespace={}", segment(ns)),
        None => "/volumes".to_string(),
    };
    let a: wire::VolumeList = get(remote, &ctx, &path, None).await?;
    Ok(a.volumes)
}

/// `GET /api/v1/volumes/NAME`. The ref's selector and path are ignored.
pub async fn volume(remote: &Remote, volume: &VolumeRef) -> Result<Volume, Error> {
    let info = require(remote, Op::Volume.what()).await?;
    let ctx = Ctx::volume(remote, Op::Volume, &info, volume);
    get(
        remote,
        &ctx,
        &volume_path(volume),
        Some(&volume.repository()),
    )
    .await
}

/// `PATCH /api/v1/volumes/NAME`: every version of the volume is deleted
/// (restorable as any delete) once `expires_at` passes and garbage
/// collection runs; `None` clears the expiry.
pub async fn update(
    remote: &Remote,
    volume: &VolumeRef,
    expires_at: Option<SystemTime>,
) -> Result<Volume, Error> {
    let info = require(remote, Op::Update.what()).await?;
    let ctx = Ctx::volume(remote, Op::Update, &info, volume);
    let body = to_body(&wire::VolumePatch {
        expires_at: expires_at.map(format_time),
    });
    let bytes = send(
        remote,
        &ctx,
        Method::PATCH,
        &volume_path(volume),
        Some(&volume.repository()),
        Some(&body),
    )
    .await?;
    decode(&ctx, &bytes)
}

/// `DELETE /api/v1/volumes/NAME`: deletes every alive version; returns
/// them, now tombstoned.
pub async fn delete_volume(remote: &Remote, volume: &VolumeRef) -> Result<Vec<Version>, Error> {
    let info = require(remote, Op::DeleteVolume.what()).await?;
    let ctx = Ctx::volume(remote, Op::DeleteVolume, &info, volume);
    let bytes = send(
        remote,
        &ctx,
        Method::DELETE,
        &volume_path(volume),
        Some(&volume.repository()),
        None,
    )
    .await?;
    let a: wire::Tombstoned = decode(&ctx, &bytes)?;
    Ok(a.tombstoned)
}

/// `GET /api/v1/volumes/NAME/-/versions`: the volume's versions, highest
/// sequence first; deleted ones too with `include_tombstoned`.
pub async fn versions(
    remote: &Remote,
    volume: &VolumeRef,
    include_tombstoned: bool,
) -> Result<Vec<Version>, Error> {
    let op = if include_tombstoned {
        Op::VersionsWithDeleted
    } else {
        Op::Versions
    };
    let info = require(remote, op.what()).await?;
    let ctx = Ctx::volume(remote, op, &info, volume);
    let mut path = format!("{}/-/versions", volume_path(volume));
    if include_tombstoned {
        path.push_str("?include_tombstoned=true");
    }
    let a: wire::VersionList = get(remote, &ctx, &path, Some(&volume.repository())).await?;
    Ok(a.versions)
}

/// The full digest a selector names among the volume's versions (alive
/// ones, and deleted ones too with `include_tombstoned`): a full digest as
/// it is, a prefix matched as SPEC.md §1.3 says (none is an error, several
/// is an error asking for more hex digits).
pub async fn resolve_digest(
    remote: &Remote,
    volume: &VolumeRef,
    digest: &DigestSelector,
    include_tombstoned: bool,
) -> Result<DigestSelector, Error> {
    if !matches!(digest, DigestSelector::B3Prefix(_)) {
        return Ok(digest.clone());
    }
    let all = versions(remote, volume, include_tombstoned).await?;
    let shown = display_ref(remote, &volume.with_selector(Selector::Head));
    match_prefix(&shown, digest, all.iter().map(|v| &v.digest)).map(DigestSelector::B3)
}

/// Picks the one candidate `digest` names; `shown` (the volume) starts the
/// error message.
fn match_prefix<'a>(
    shown: &str,
    digest: &DigestSelector,
    candidates: impl IntoIterator<Item = &'a B3Digest>,
) -> Result<B3Digest, Error> {
    digest.resolve(candidates).map_err(|e| match e {
        sealvol_spec::digest::DigestError::Ambiguous { .. } => {
            Error::Usage(format!("{shown}: {e}"))
        }
        e => Error::NotFound(format!("{shown}: {e}")),
    })
}

/// `GET /api/v1/volumes/NAME/-/versions/DIGEST`: a version, alive or
/// deleted. A prefix is matched among all of them.
pub async fn version(
    remote: &Remote,
    volume: &VolumeRef,
    digest: &DigestSelector,
) -> Result<Version, Error> {
    let info = require(remote, Op::Version.what()).await?;
    let digest = resolve_digest(remote, volume, digest, true).await?;
    let ctx = Ctx::version(remote, Op::Version, &info, volume, &digest);
    get(
        remote,
        &ctx,
        &version_path(volume, &digest),
        Some(&volume.repository()),
    )
    .await
}

/// `DELETE /api/v1/volumes/NAME/-/versions/DIGEST`: tombstones an alive
/// version (a prefix is matched among the alive ones) and returns it.
pub async fn delete_version(
    remote: &Remote,
    volume: &VolumeRef,
    digest: &DigestSelector,
) -> Result<Version, Error> {
    let info = require(remote, Op::Delete.what()).await?;
    let digest = resolve_digest(remote, volume, digest, false).await?;
    let ctx = Ctx::version(remote, Op::Delete, &info, volume, &digest);
    let bytes = send(
        remote,
        &ctx,
        Method::DELETE,
        &version_path(volume, &digest),
        Some(&volume.repository()),
        None,
    )
    .await?;
    decode(&ctx, &bytes)
}

/// `POST /api/v1/volumes/NAME/-/versions/DIGEST/restore`: brings a deleted
/// version back within the retention window. It needs the full digest: a
/// prefix could name a version nobody meant to bring back.
pub async fn restore(
    remote: &Remote,
    volume: &VolumeRef,
    digest: &DigestSelector,
) -> Result<Version, Error> {
    let info = require(remote, Op::Restore.what()).await?;
    if matches!(digest, DigestSelector::B3Prefix(_)) {
        let shown = display_ref(remote, &volume.with_selector(Selector::Head));
        return Err(Error::Usage(format!(
            "{}: restore needs the full digest (b3:<64 hex> or sha256:<64 hex>); `sealvol versions {shown} --include-tombstoned` lists deleted versions",
            display_ref(remote, &volume.with_selector(Selector::Digest(digest.clone())))
        )));
    }
    let ctx = Ctx::version(remote, Op::Restore, &info, volume, digest);
    let bytes = send(
        remote,
        &ctx,
        Method::POST,
        &format!("{}/restore", version_path(volume, digest)),
        Some(&volume.repository()),
        None,
    )
    .await?;
    decode(&ctx, &bytes)
}

/// `PUT /api/v1/volumes/NAME/-/tags/TAG`: points a user tag at an alive
/// version, removed by garbage collection once `expires_at` passes
/// (`None`: never).
pub async fn set_tag(
    remote: &Remote,
    volume: &VolumeRef,
    tag: &Tag,
    digest: &B3Digest,
    expires_at: Option<SystemTime>,
) -> Result<TagInfo, Error> {
    let op = if expires_at.is_some() {
        Op::SetTagExpiry
    } else {
        Op::SetTag
    };
    let info = require(remote, op.what()).await?;
    let sel = DigestSelector::B3(*digest);
    let mut ctx = Ctx::version(remote, op, &info, volume, &sel);
    ctx.tag = tag.as_str().to_string();
    let body = to_body(&wire::TagRequest {
        digest: digest.to_string(),
        expires_at: expires_at.map(format_time),
    });
    let bytes = send(
        remote,
        &ctx,
        Method::PUT,
        &format!("{}/-/tags/{}", volume_path(volume), segment(tag.as_str())),
        Some(&volume.repository()),
        Some(&body),
    )
    .await?;
    decode(&ctx, &bytes)
}

/// `DELETE /api/v1/volumes/NAME/-/tags/TAG`.
pub async fn delete_tag(remote: &Remote, volume: &VolumeRef, tag: &Tag) -> Result<(), Error> {
    let info = require(remote, Op::DeleteTag.what()).await?;
    let mut ctx = Ctx::volume(remote, Op::DeleteTag, &info, volume);
    ctx.tag = tag.as_str().to_string();
    send(
        remote,
        &ctx,
        Method::DELETE,
        &format!("{}/-/tags/{}", volume_path(volume), segment(tag.as_str())),
        Some(&volume.repository()),
        None,
    )
    .await?;
    Ok(())
}

/// `POST /api/v1/gc[?dry_run=true]`: runs garbage collection now (SPEC.md
/// §7.4), or says what it would do.
pub async fn gc(remote: &Remote, dry_run: bool) -> Result<GcReport, Error> {
    let info = require(remote, Op::Gc.what()).await?;
    let ctx = Ctx::registry(remote, Op::Gc, &info);
    let path = if dry_run { "/gc?dry_run=true" } else { "/gc" };
    let bytes = send(remote, &ctx, Method::POST, path, None, None).await?;
    decode(&ctx, &bytes)
}

/// An RFC 3339 UTC time to the second, as the API writes them.
pub fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Which call failed, for its error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Namespaces,
    Volumes,
    Volume,
    Update,
    DeleteVolume,
    Versions,
    VersionsWithDeleted,
    Version,
    Delete,
    Restore,
    SetTag,
    SetTagExpiry,
    DeleteTag,
    Claim,
    Gc,
}

impl Op {
    /// What a registry without the API "does not support".
    pub(crate) fn what(self) -> &'static str {
        match self {
            Op::Namespaces | Op::Volumes | Op::Volume => "volume records",
            Op::Update => "volume expiry",
            Op::DeleteVolume | Op::Delete => "deleting versions",
            Op::Versions | Op::Version => "version history",
            Op::VersionsWithDeleted => "listing deleted versions",
            Op::Restore => "restoring deleted versions",
            Op::SetTag | Op::DeleteTag => "tags through the volume API",
            Op::SetTagExpiry => "tag expiry",
            Op::Claim => "push claims",
            Op::Gc => "garbage collection",
        }
    }
}

/// Everything an error message may name.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    op: Op,
    registry: String,
    /// The volume as the user would type it (`bdn:ns/vol`).
    volume: String,
    /// The version (`bdn:ns/vol@b3:…`), or the volume.
    target: String,
    tag: String,
    retention_seconds: u64,
}

impl Ctx {
    fn registry(remote: &Remote, op: Op, info: &ApiInfo) -> Ctx {
        Ctx {
            op,
            registry: remote.registry().to_string(),
            volume: remote.registry().to_string(),
            target: remote.registry().to_string(),
            tag: String::new(),
            retention_seconds: info.retention_seconds,
        }
    }

    pub(crate) fn volume(remote: &Remote, op: Op, info: &ApiInfo, volume: &VolumeRef) -> Ctx {
        let shown = display_ref(remote, &volume.with_selector(Selector::Head));
        Ctx {
            volume: shown.clone(),
            target: shown,
            ..Ctx::registry(remote, op, info)
        }
    }

    fn version(
        remote: &Remote,
        op: Op,
        info: &ApiInfo,
        volume: &VolumeRef,
        digest: &DigestSelector,
    ) -> Ctx {
        Ctx {
            target: display_ref(
                remote,
                &volume.with_selector(Selector::Digest(digest.clone())),
            ),
            ..Ctx::volume(remote, op, info, volume)
        }
    }
}

/// A failed call: the error for the user, and the API error code (`None`
/// when the answer had none this release knows) for callers that react to
/// one.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) code: Option<ErrorCode>,
    pub(crate) error: Error,
}

impl From<Failed> for Error {
    fn from(f: Failed) -> Error {
        f.error
    }
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed { code: None, error }
    }
}

impl CallCtx for Ctx {
    const SPEC: &'static str = "§7.3";
    type Error = Failed;

    fn registry(&self) -> &str {
        &self.registry
    }

    fn call(&self) -> String {
        format!("{} of {}", self.op.what(), self.target)
    }

    fn refused(&self, status: u16, body: &[u8]) -> Failed {
        failure(self, status, body)
    }
}

/// The error for an answer other than 2xx (SPEC.md §7.2's codes): one line
/// naming the ref and what to do.
fn failure(ctx: &Ctx, status: u16, body: &[u8]) -> Failed {
    let (code, message) = error_code(body);
    let Ctx {
        volume,
        target,
        tag,
        ..
    } = ctx;
    let known = ErrorCode::parse(&code);
    let error = match known {
        Some(ErrorCode::PushInProgress) => {
            Error::Conflict(format!("another push to {volume} is in progress; push again"))
        }
        Some(ErrorCode::ClaimUnknown) => Error::Conflict(format!(
            "the push claim on {volume} lapsed before it was renewed; push again"
        )),
        Some(ErrorCode::NotDeleted) => Error::Conflict(format!(
            "{target} is not deleted; there is nothing to restore"
        )),
        Some(ErrorCode::RetentionExpired) => Error::Gone(format!(
            "{target} was deleted more than {} ago and cannot be restored",
            human_seconds(ctx.retention_seconds)
        )),
        Some(ErrorCode::VolumeUnknown) => Error::NotFound(format!("{volume}: no such volume")),
        Some(ErrorCode::VersionUnknown) => Error::NotFound(match ctx.op {
            Op::Restore => format!(
                "{target}: no deleted version of this volume has this digest (restored already, or purged)"
            ),
            Op::Delete => format!(
                "{target}: no version of this volume has this digest (or it is deleted already)"
            ),
            Op::SetTag | Op::SetTagExpiry => {
                format!("{target}: no alive version of this volume has this digest")
            }
            _ => format!("{target}: no version of this volume has this digest"),
        }),
        Some(ErrorCode::TagUnknown) => Error::NotFound(format!("{volume}: no tag {tag:?} on this volume")),
        Some(ErrorCode::TagReserved) => Error::Usage(format!(
            "{volume}: tag {tag:?} is reserved: `head` and `b3-…` belong to the registry"
        )),
        Some(ErrorCode::NameInvalid | ErrorCode::Invalid) => Error::Usage(format!(
            "{target}: the registry refused the request: {}",
            one_line(&message)
        )),
        // A registry without the API: no route, no error code.
        _ if matches!(status, 404 | 405) && code.is_empty() => {
            Error::Transport(TransportError::Unsupported {
                registry: ctx.registry.clone(),
                what: format!("{} (it has no sealvol volume API)", ctx.op.what()),
            })
        }
        _ => Error::Transport(other_failure(
            &ctx.registry,
            status,
            &code,
            &message,
            &ctx.call(),
        )),
    };
    Failed { code: known, error }
}

pub(crate) fn volume_path(volume: &VolumeRef) -> String {
    format!("/volumes/{}", volume.repository())
}

fn version_path(volume: &VolumeRef, digest: &DigestSelector) -> String {
    format!("{}/-/versions/{digest}", volume_path(volume))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(op: Op) -> Ctx {
        Ctx {
            op,
            registry: "127.0.0.1:5000".into(),
            volume: "bdn:ns/vol".into(),
            target: "bdn:ns/vol@b3:abc".into(),
            tag: "prod".into(),
            retention_seconds: 7 * 86_400,
        }
    }

    fn body(code: &str) -> Vec<u8> {
        json!({"errors":[{"code":code,"message":"server words","detail":null}]})
            .to_string()
            .into_bytes()
    }

    fn message(op: Op, status: u16, b: &[u8]) -> (Option<ErrorCode>, Error) {
        let f = failure(&ctx(op), status, b);
        (f.code, f.error)
    }

    #[test]
    fn error_bodies_become_one_actionable_line() {
        let (code, e) = message(Op::Claim, 409, &body("PUSH_IN_PROGRESS"));
        assert_eq!(code, Some(ErrorCode::PushInProgress));
        assert!(matches!(e, Error::Conflict(_)));
        assert_eq!(
            e.to_string(),
            "another push to bdn:ns/vol is in progress; push again"
        );
        let (_, e) = message(Op::Restore, 410, &body("RETENTION_EXPIRED"));
        assert!(matches!(e, Error::Gone(_)));
        assert_eq!(
            e.to_string(),
            "bdn:ns/vol@b3:abc was deleted more than 7 days ago and cannot be restored"
        );
        let (_, e) = message(Op::Restore, 409, &body("NOT_DELETED"));
        assert!(matches!(e, Error::Conflict(_)), "{e}");
        let (_, e) = message(Op::Volume, 404, &body("VOLUME_UNKNOWN"));
        assert_eq!(e.to_string(), "bdn:ns/vol: no such volume");
        let (_, e) = message(Op::Delete, 404, &body("VERSION_UNKNOWN"));
        assert!(matches!(e, Error::NotFound(_)));
        assert!(e.to_string().starts_with("bdn:ns/vol@b3:abc: "), "{e}");
        let (_, e) = message(Op::DeleteTag, 404, &body("TAG_UNKNOWN"));
        assert_eq!(e.to_string(), "bdn:ns/vol: no tag \"prod\" on this volume");
        let (_, e) = message(Op::SetTag, 400, &body("TAG_RESERVED"));
        assert!(matches!(e, Error::Usage(_)));
        let (_, e) = message(Op::SetTag, 400, &body("INVALID"));
        assert!(e.to_string().ends_with("server words"), "{e}");
        let (code, e) = message(Op::Claim, 404, &body("CLAIM_UNKNOWN"));
        assert_eq!(code, Some(ErrorCode::ClaimUnknown));
        assert!(matches!(e, Error::Conflict(_)));
    }

    #[test]
    fn answers_without_a_code_name_the_registry() {
        // A registry with no such route: the operation is not supported.
        let (code, e) = message(Op::Gc, 404, b"404 page not found\n");
        assert_eq!(code, None);
        assert_eq!(
            e.to_string(),
            "registry 127.0.0.1:5000 does not support garbage collection (it has no sealvol volume API)"
        );
        let (_, e) = message(Op::Delete, 405, b"");
        assert!(
            e.to_string().contains("does not support deleting versions"),
            "{e}"
        );
        let (_, e) = message(Op::Delete, 401, &body("UNAUTHORIZED"));
        assert!(
            matches!(e, Error::Transport(TransportError::Denied { .. })),
            "{e}"
        );
        let (_, e) = message(Op::Delete, 400, &body("SOMETHING_NEW"));
        let line = e.to_string();
        assert!(
            line.contains("HTTP 400 SOMETHING_NEW: server words") && !line.contains('\n'),
            "{line}"
        );
    }

    #[test]
    fn prefixes_match_exactly_one_version() {
        let a: B3Digest = format!("b3:{}", "ab".repeat(32)).parse().unwrap();
        let b: B3Digest = format!("b3:abababababab{}", "cd".repeat(26))
            .parse()
            .unwrap();
        let c: B3Digest = format!("b3:{}", "ef".repeat(32)).parse().unwrap();
        let all = [a, b, c];
        let sel: DigestSelector = "efefefefefef".parse().unwrap();
        assert_eq!(match_prefix("bdn:ns/vol", &sel, &all).unwrap(), c);
        let sel: DigestSelector = "b3:abababababab".parse().unwrap();
        let e = match_prefix("bdn:ns/vol", &sel, &all).unwrap_err();
        assert!(matches!(e, Error::Usage(_)), "{e}");
        assert!(e.to_string().contains("give more hex digits"), "{e}");
        assert!(e.to_string().contains("2 versions"), "{e}");
        let sel: DigestSelector = "012345678901".parse().unwrap();
        let e = match_prefix("bdn:ns/vol", &sel, &all).unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
        assert!(
            e.to_string().starts_with("bdn:ns/vol: no version matches"),
            "{e}"
        );
    }
}
