//! The registry volume API (SPEC.md §7) from the client side: a volume's
//! history (versions alive and deleted), deleting and restoring versions,
//! tag and volume expiry, push claims and garbage collection, over the
//! same [`Remote`] the OCI calls use.
//!
//! Only a registry that knows volumes (`sealvol serve`) has this API; any
//! other answers 404 under `/api/v1`, [`supported`] says `false`, and every
//! call here fails with one line naming the registry and what it cannot
//! do. It is not the OCI view: pushing, pulling and reading go through
//! [`crate::push`], [`crate::pull`] and [`crate::inspect`], which work on
//! every registry and use this module only where the API adds something
//! (a push claim, a listing with deleted versions, tag expiry).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sealvol_client::Error> {
//! use sealvol_client::{lifecycle, Remote};
//! let remote = Remote::connect("127.0.0.1:5000", false)?;
//! let volume: sealvol_spec::reference::VolumeRef = "bdn:weights/llama".parse().unwrap();
//! for v in lifecycle::versions(&remote, &volume, true).await? {
//!     println!("{} {} {}", v.sequence, v.digest, v.lifecycle);
//! }
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use reqwest::Method;
use sealvol_spec::api::{self as wire, ErrorBody, ErrorCode};
use sealvol_spec::reference::{Selector, Tag, VolumeRef};
use sealvol_spec::{B3Digest, DigestSelector};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::remote::{ApiAnswer, Remote, TransportError};
use crate::resolve::display_ref;
use crate::Error;

/// The bodies of SPEC.md §7.3, one definition shared with the registry.
pub use sealvol_spec::api::{
    ApiInfo, Claim, GcReport, Head, Lifecycle, TagInfo, Version, Volume, API,
};

/// What the registry says about its volume API: `None` when it has none.
/// Asked once per [`Remote`] (and its clones); a registry that cannot be
/// reached, or fails with 5xx on every attempt, is an error and is asked
/// again next time.
pub async fn info(remote: &Remote) -> Result<Option<ApiInfo>, Error> {
    let probe = || async {
        let answer = remote.api(Method::GET, "", None, None).await?;
        let info = match answer.status {
            200 => serde_json::from_slice::<ApiInfo>(&answer.body)
                .ok()
                .filter(|i| i.api == API),
            _ => None,
        };
        tracing::debug!(
            registry = remote.registry(),
            status = answer.status,
            api = info.is_some(),
            "probing /api/v1"
        );
        Ok::<_, Error>(info)
    };
    Ok(remote.api_info_cell().get_or_try_init(probe).await?.clone())
}

/// Whether the registry implements SPEC.md §7.
pub async fn supported(remote: &Remote) -> Result<bool, Error> {
    Ok(info(remote).await?.is_some())
}

/// The registry's [`ApiInfo`], or the error "registry HOST does not
/// support `what` (it has no sealvol volume API)".
pub async fn require(remote: &Remote, what: &str) -> Result<ApiInfo, Error> {
    info(remote)
        .await?
        .ok_or_else(|| unsupported(remote.registry(), what))
}

fn unsupported(registry: &str, what: &str) -> Error {
    Error::Transport(TransportError::Unsupported {
        registry: registry.to_string(),
        what: format!("{what} (it has no sealvol volume API)"),
    })
}

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

/// `POST /api/v1/volumes/NAME/-/claim`: takes the volume's push claim, or
/// fails with "another push to REF is in progress; push again".
pub async fn claim_acquire(
    remote: &Remote,
    volume: &VolumeRef,
    holder: &str,
) -> Result<Claim, Error> {
    Ok(claim_call(remote, volume, Method::POST, None, Some(holder)).await?)
}

/// `PUT /api/v1/volumes/NAME/-/claim/TOKEN`: renews a claim. One that
/// lapsed is an [`Error::Conflict`] saying so.
pub async fn claim_renew(remote: &Remote, volume: &VolumeRef, token: &str) -> Result<Claim, Error> {
    Ok(claim_call(remote, volume, Method::PUT, Some(token), None).await?)
}

/// `DELETE /api/v1/volumes/NAME/-/claim/TOKEN`; a claim already gone is
/// released too.
pub async fn claim_release(remote: &Remote, volume: &VolumeRef, token: &str) -> Result<(), Error> {
    let info = require(remote, Op::Claim.what()).await?;
    let ctx = Ctx::volume(remote, Op::Claim, &info, volume);
    let path = format!("{}/-/claim/{}", volume_path(volume), segment(token));
    match send(
        remote,
        &ctx,
        Method::DELETE,
        &path,
        Some(&volume.repository()),
        None,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(f) if f.code == Some(ErrorCode::ClaimUnknown) => Ok(()),
        Err(f) => Err(f.into()),
    }
}

/// Acquires (no `token`) or renews (`token`) a claim, keeping the error
/// code for [`PushClaim`]'s renewer.
async fn claim_call(
    remote: &Remote,
    volume: &VolumeRef,
    method: Method,
    token: Option<&str>,
    holder: Option<&str>,
) -> Result<Claim, Failed> {
    let info = require(remote, Op::Claim.what())
        .await
        .map_err(Failed::from)?;
    let ctx = Ctx::volume(remote, Op::Claim, &info, volume);
    let mut path = format!("{}/-/claim", volume_path(volume));
    if let Some(t) = token {
        path.push('/');
        path.push_str(&segment(t));
    }
    let body = holder.map(|h| {
        to_body(&wire::ClaimRequest {
            holder: h.to_string(),
        })
    });
    let bytes = send(
        remote,
        &ctx,
        method,
        &path,
        Some(&volume.repository()),
        body.as_ref(),
    )
    .await?;
    decode(&ctx, &bytes).map_err(Failed::from)
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

/// A push claim held for as long as a push runs: renewed every third of
/// its lifetime in the background, released by [`PushClaim::release`].
/// Dropped without a release (a push cancelled), it stops renewing and
/// lapses on its own.
pub struct PushClaim {
    remote: Remote,
    volume: VolumeRef,
    state: Arc<Mutex<ClaimState>>,
    renewer: tokio::task::JoinHandle<()>,
}

struct ClaimState {
    token: String,
    /// Set when the claim lapsed and another push took the volume.
    lost: Option<String>,
}

/// What a push claim's holder says: `sealvol push <host> pid <pid>`.
pub fn push_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into());
    format!("sealvol push {host} pid {}", std::process::id())
}

/// Takes `volume`'s push claim and keeps it renewed; `None` on a registry
/// without the volume API (SPEC.md §7.4: such a push takes no claim).
pub async fn hold_push_claim(
    remote: &Remote,
    volume: &VolumeRef,
    holder: &str,
) -> Result<Option<PushClaim>, Error> {
    if !supported(remote).await? {
        tracing::debug!(
            registry = remote.registry(),
            "no volume API: pushing without a claim"
        );
        return Ok(None);
    }
    let claim = claim_acquire(remote, volume, holder).await?;
    let every = renew_interval(claim.ttl_seconds);
    let state = Arc::new(Mutex::new(ClaimState {
        token: claim.token,
        lost: None,
    }));
    let renewer = tokio::spawn(renew_loop(
        remote.clone(),
        volume.clone(),
        holder.to_string(),
        state.clone(),
        every,
    ));
    Ok(Some(PushClaim {
        remote: remote.clone(),
        volume: volume.clone(),
        state,
        renewer,
    }))
}

/// A third of the claim's lifetime, so two renewals may fail in a row.
fn renew_interval(ttl_seconds: u64) -> Duration {
    Duration::from_secs(ttl_seconds.max(3)) / 3
}

async fn renew_loop(
    remote: Remote,
    volume: VolumeRef,
    holder: String,
    state: Arc<Mutex<ClaimState>>,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        let token = state.lock().expect("claim state").token.clone();
        match claim_call(&remote, &volume, Method::PUT, Some(&token), None).await {
            Ok(_) => {}
            // It lapsed (the process was stopped, the network was away):
            // take it again unless another push has it now.
            Err(f) if f.code == Some(ErrorCode::ClaimUnknown) => {
                tracing::warn!("the push claim lapsed; taking it again");
                match claim_acquire(&remote, &volume, &holder).await {
                    Ok(c) => state.lock().expect("claim state").token = c.token,
                    Err(e) => {
                        state.lock().expect("claim state").lost = Some(e.to_string());
                        return;
                    }
                }
            }
            Err(f) => {
                tracing::debug!(error = %f.error, "renewing the push claim; trying again later")
            }
        }
    }
}

impl PushClaim {
    /// An error once the claim lapsed and could not be taken again:
    /// another push now owns the volume, and this one must not move tags.
    pub fn check(&self) -> Result<(), Error> {
        match &self.state.lock().expect("claim state").lost {
            None => Ok(()),
            Some(why) => Err(Error::Conflict(format!(
                "the push claim on {} lapsed and could not be taken again ({why}); push again",
                display_ref(&self.remote, &self.volume.with_selector(Selector::Head))
            ))),
        }
    }

    /// Stops renewing and gives the claim back; a failure only delays the
    /// next push until the claim lapses, so it is logged, not returned.
    pub async fn release(self) {
        self.renewer.abort();
        let token = self.state.lock().expect("claim state").token.clone();
        if let Err(e) = claim_release(&self.remote, &self.volume, &token).await {
            tracing::debug!(error = %e, "releasing the push claim");
        }
    }
}

impl Drop for PushClaim {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// An RFC 3339 UTC time to the second, as the API writes them.
pub fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// An expiry a user typed: an RFC 3339 UTC time (`2026-12-09T00:00:00Z`)
/// or a duration from `now` (`24h`, `7d`, `1h 30m`). A time in the past is
/// refused: it would expire at the next garbage collection.
pub fn parse_expiry(s: &str, now: SystemTime) -> Result<SystemTime, Error> {
    let s = s.trim();
    let t = if let Ok(t) = humantime::parse_rfc3339(s) {
        t
    } else if let Ok(d) = humantime::parse_duration(s) {
        now.checked_add(d)
            .ok_or_else(|| Error::Usage(format!("expiry {s:?} is too far away")))?
    } else {
        return Err(Error::Usage(format!(
            "invalid expiry {s:?}: give an RFC 3339 UTC time (2026-12-09T00:00:00Z) or a duration from now (24h, 7d)"
        )));
    };
    if t < now {
        return Err(Error::Usage(format!(
            "expiry {s:?} is in the past; give a later time or a duration from now (24h, 7d)"
        )));
    }
    Ok(t)
}

/// A duration in the largest whole unit: `7 days`, `1 hour`, `90 seconds`.
pub fn human_seconds(secs: u64) -> String {
    let (n, unit) = match secs {
        0 => (0, "second"),
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// Which call failed, for its error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
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
    fn what(self) -> &'static str {
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
struct Ctx {
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

    fn volume(remote: &Remote, op: Op, info: &ApiInfo, volume: &VolumeRef) -> Ctx {
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
struct Failed {
    code: Option<ErrorCode>,
    error: Error,
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

/// What the errors of one volume API call name, for [`send`], [`get`] and
/// [`decode`]: the calls of this module (SPEC.md §7) and those of
/// [`crate::sync`] (SPEC.md §8) each have their own.
pub(crate) trait CallCtx {
    /// The section of SPEC.md that describes the answers.
    const SPEC: &'static str;
    /// What a refused call fails with: [`Error`], or one that keeps the
    /// API error code.
    type Error: From<Error> + Into<Error>;
    fn registry(&self) -> &str;
    /// The call, to start a message: `listing syncs`, `version history of
    /// bdn:ns/vol`.
    fn call(&self) -> String;
    /// The error for an answer other than 2xx.
    fn refused(&self, status: u16, body: &[u8]) -> Self::Error;
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

/// The code and message of the first error in an API error body (SPEC.md
/// §7.2) as they came; empty strings when the body is not one.
pub(crate) fn error_code(body: &[u8]) -> (String, String) {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|b| b.errors.into_iter().next())
        .map(|i| (i.code, i.message))
        .unwrap_or_default()
}

/// A request body as JSON. The bodies are plain structs of strings.
pub(crate) fn to_body(body: &impl serde::Serialize) -> Value {
    serde_json::to_value(body).expect("a request body serializes")
}

/// The error for a refused call that no code explains to the caller:
/// 401 and 403 are denied; anything else names `call`, the status, the
/// code and the message as they came.
pub(crate) fn other_failure(
    registry: &str,
    status: u16,
    code: &str,
    message: &str,
    call: &str,
) -> TransportError {
    let message = one_line(message);
    match status {
        401 | 403 => TransportError::Denied {
            registry: registry.to_string(),
            message: if message.is_empty() {
                format!("HTTP {status}")
            } else {
                message
            },
        },
        _ => TransportError::Registry {
            registry: registry.to_string(),
            message: format!(
                "{call}: HTTP {status}{}{code}{}{message}",
                if code.is_empty() { "" } else { " " },
                if message.is_empty() { "" } else { ": " },
            ),
        },
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

/// The first line of `s` that is not blank, trimmed, at most 300
/// characters: a registry's words, fit for a one-line message.
pub(crate) fn one_line(s: &str) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(300).collect()
}

/// Sends a call and returns the body of a 2xx answer; a registry that
/// cannot be reached, or refuses the call, is `ctx`'s error.
pub(crate) async fn send<C: CallCtx>(
    remote: &Remote,
    ctx: &C,
    method: Method,
    path: &str,
    repo: Option<&str>,
    body: Option<&Value>,
) -> Result<Bytes, C::Error> {
    let answer = remote
        .api(method, path, repo, body)
        .await
        .map_err(|e| C::Error::from(Error::from(e)))?;
    answered(ctx, answer)
}

/// The body of a 2xx answer, or `ctx`'s error for any other.
pub(crate) fn answered<C: CallCtx>(ctx: &C, answer: ApiAnswer) -> Result<Bytes, C::Error> {
    if (200..300).contains(&answer.status) {
        Ok(answer.body)
    } else {
        Err(ctx.refused(answer.status, &answer.body))
    }
}

/// `GET`s `path` and decodes the answer.
pub(crate) async fn get<C: CallCtx, T: DeserializeOwned>(
    remote: &Remote,
    ctx: &C,
    path: &str,
    repo: Option<&str>,
) -> Result<T, Error> {
    let bytes = send(remote, ctx, Method::GET, path, repo, None)
        .await
        .map_err(Into::into)?;
    decode(ctx, &bytes)
}

/// An answer as SPEC.md describes it, or an error naming the call.
pub(crate) fn decode<C: CallCtx, T: DeserializeOwned>(ctx: &C, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Transport(TransportError::Registry {
            registry: ctx.registry().to_string(),
            message: format!(
                "{}: the answer is not what SPEC.md {} describes ({e})",
                ctx.call(),
                C::SPEC
            ),
        })
    })
}

fn volume_path(volume: &VolumeRef) -> String {
    format!("/volumes/{}", volume.repository())
}

fn version_path(volume: &VolumeRef, digest: &DigestSelector) -> String {
    format!("{}/-/versions/{digest}", volume_path(volume))
}

/// Percent-encodes what is not unreserved in a path segment or query value
/// (tokens and holders come from elsewhere; names and digests never need
/// it).
pub(crate) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

    #[test]
    fn expiries_are_times_or_durations_from_now() {
        let now = humantime::parse_rfc3339("2026-12-02T18:40:00Z").unwrap();
        let at = |s: &str| parse_expiry(s, now).map(format_time);
        assert_eq!(at("2026-12-09T00:00:00Z").unwrap(), "2026-12-09T00:00:00Z");
        assert_eq!(at("24h").unwrap(), "2026-12-03T18:40:00Z");
        assert_eq!(at("7d").unwrap(), "2026-12-09T18:40:00Z");
        assert_eq!(at(" 1h 30m ").unwrap(), "2026-12-02T20:10:00Z");
        for bad in ["tomorrow", "2026-12-09", "2026-12-09T00:00:00+01:00", ""] {
            let e = at(bad).unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{bad}: {e}");
            assert!(e.to_string().contains("RFC 3339"), "{bad}: {e}");
        }
        let e = at("2020-01-01T00:00:00Z").unwrap_err();
        assert!(e.to_string().contains("in the past"), "{e}");
    }

    #[test]
    fn durations_print_in_whole_units() {
        assert_eq!(human_seconds(604_800), "7 days");
        assert_eq!(human_seconds(86_400), "1 day");
        assert_eq!(human_seconds(7_200), "2 hours");
        assert_eq!(human_seconds(120), "2 minutes");
        assert_eq!(human_seconds(61), "61 seconds");
    }

    #[test]
    fn claims_are_renewed_three_times_a_lifetime() {
        // The answers themselves are sealvol_spec::api's, tested there.
        let info: ApiInfo = serde_json::from_value(json!({"api": API})).unwrap();
        assert_eq!(
            renew_interval(info.claim_ttl_seconds),
            Duration::from_secs(20)
        );
        assert_eq!(renew_interval(0), Duration::from_secs(1));
    }

    #[test]
    fn segments_are_escaped() {
        assert_eq!(segment("abc-1.2_x"), "abc-1.2_x");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
