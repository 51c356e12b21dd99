//! Sync jobs (SPEC.md §8) from the client side: asking a registry to copy
//! a source (a Hugging Face repository, a bucket prefix, a folder on the
//! registry's host, a version on another registry) into a new sealed
//! version of one of its volumes, following the job, cancelling it, and
//! the secrets jobs read their credentials from.
//!
//! The copy runs on the registry; nothing passes through this process, and
//! a job goes on when the client that started it stops waiting. This module
//! is not the copier (that is the `sealvol-sync` crate inside the registry)
//! and not the command line: it types the calls of SPEC.md §8.3 over
//! [`Remote::api`] and turns every refusal into one line a user can act on.
//! A registry without the volume API (SPEC.md §7), or with one but without
//! sync jobs, fails every call with "registry HOST does not support …".
//!
//! ```no_run
//! # async fn demo() -> Result<(), sealvol_client::Error> {
//! use sealvol_client::{sync, Remote};
//! let dest: sealvol_spec::reference::VolumeRef = "bdn:weights/qwen3-8b:prod".parse().unwrap();
//! let remote = Remote::connect(&sealvol_spec::reference::VolumeRef::default_registry(), false)?;
//! let request = sync::SyncRequest {
//!     source: "hf://Qwen/Qwen3-8B".into(),
//!     dest: sync::SyncDest::from_ref(&dest)?,
//!     include: vec!["*.safetensors".into(), "*.json".into()],
//!     exclude: vec![],
//!     secret: Some("hf-token".parse()?),
//! };
//! let job = sync::start_sync(&remote, &request).await?;
//! let done = sync::wait(&remote, &job.id, sync::POLL_INTERVAL, |_| {}).await?;
//! if let Some(r) = sync::version_ref(&remote, &done) {
//!     println!("{r}");
//! }
//! # Ok(()) }
//! ```

use std::str::FromStr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::Method;
use sealvol_spec::api::{self as wire, ErrorCode};
use sealvol_spec::reference::{Selector, Tag, VolumeRef};
use sealvol_spec::DigestSelector;

use crate::api::{self, decode, get, segment, send, CallCtx};
use crate::remote::Remote;
use crate::resolve::display_ref;
use crate::{Error, TransportError};

/// How often [`wait`] asks for a job by default.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How long [`wait`] keeps asking a registry it cannot reach (one that
/// restarts keeps its jobs, SPEC.md §8.2) before it gives up.
pub const WAIT_PATIENCE: Duration = Duration::from_secs(60);

/// The largest secret value a registry accepts (SPEC.md §8.3).
pub const SECRET_MAX_BYTES: usize = 64 * 1024;

/// The bodies of SPEC.md §8, one definition shared with the registry.
pub use sealvol_spec::api::{
    Canceled, JobError, RequestError, ScheduleChanged, ScheduleRequest, SecretName, SyncDest,
    SyncJob, SyncProgress, SyncRequest, SyncSchedule, SyncState, SyncedVersion,
};

impl From<RequestError> for Error {
    fn from(e: RequestError) -> Error {
        Error::Usage(e.to_string())
    }
}

/// A destination as a ref on `registry` (`ns/vol:tag` with the registry's
/// host), or `None` for a name that is not `ns/vol`.
fn dest_volume_ref(dest: &SyncDest, registry: &str, selector: Selector) -> Option<VolumeRef> {
    let (namespace, volume) = dest.name.rsplit_once('/')?;
    if namespace.is_empty() || volume.is_empty() {
        return None;
    }
    Some(VolumeRef {
        registry: Some(registry.to_string()),
        namespace: namespace.to_string(),
        volume: volume.to_string(),
        selector,
        path: None,
    })
}

/// Checks a job id a user typed before it goes into a URL: the registry
/// hands out `sync-<16 hex>`, and a typo is answered by the registry's
/// "not found"; only what could not be one path segment is refused here.
pub fn check_sync_id(id: &str) -> Result<(), Error> {
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{id:?} is not a sync id (sync-<16 hex>); `sealvol sync list` shows them"
        )))
    }
}

/// The full ref of the version a `READY` job sealed, as `push` reports
/// refs: `bdn:ns/vol@b3:<hex>` on the default registry, qualified
/// elsewhere. `None` until the job has a version.
pub fn version_ref(remote: &Remote, job: &SyncJob) -> Option<String> {
    let v = job.version.as_ref()?;
    let selector = Selector::Digest(DigestSelector::B3(v.digest));
    Some(
        match dest_volume_ref(&job.dest, remote.registry(), selector) {
            Some(r) => display_ref(remote, &r),
            // Not `ns/vol`: show what the registry said.
            None => format!("{}@{}", job.dest.name, v.digest),
        },
    )
}

/// The job's destination as a ref with its tag (`bdn:ns/vol:prod`).
pub fn dest_ref(remote: &Remote, dest: &SyncDest) -> String {
    let selector = match dest.tag.as_deref().map(Tag::from_str) {
        Some(Ok(t)) => Selector::Tag(t),
        _ => Selector::Head,
    };
    match dest_volume_ref(dest, remote.registry(), selector) {
        Some(r) => display_ref(remote, &r),
        None => match &dest.tag {
            Some(t) => format!("{}:{t}", dest.name),
            None => dest.name.clone(),
        },
    }
}

/// `POST /api/v1/syncs`: stores the job (`QUEUED`) and returns it; the
/// registry copies in the background.
pub async fn start_sync(remote: &Remote, request: &SyncRequest) -> Result<SyncJob, Error> {
    let mut ctx = Ctx::new(remote, Op::Start).await?;
    ctx.secret = request.secret.as_ref().map(|s| s.to_string());
    ctx.dest = dest_ref(remote, &request.dest);
    let body = api::to_body(request);
    let bytes = send(
        remote,
        &ctx,
        Method::POST,
        "/syncs",
        Some(&request.dest.name),
        Some(&body),
    )
    .await?;
    decode(&ctx, &bytes)
}

/// `GET /api/v1/syncs/ID`.
pub async fn sync_job(remote: &Remote, id: &str) -> Result<SyncJob, Error> {
    check_sync_id(id)?;
    let mut ctx = Ctx::new(remote, Op::Get).await?;
    ctx.id = id.to_string();
    get(remote, &ctx, &job_path(id), None).await
}

/// `GET /api/v1/syncs[?dest=NAME]`: jobs, newest first; with `dest`
/// (`namespace/volume`) only those writing that volume.
pub async fn list_syncs(remote: &Remote, dest: Option<&str>) -> Result<Vec<SyncJob>, Error> {
    let ctx = Ctx::new(remote, Op::List).await?;
    let path = match dest {
        Some(name) => format!("/syncs?dest={}", segment(name)),
        None => "/syncs".to_string(),
    };
    let a: wire::SyncList = get(remote, &ctx, &path, None).await?;
    Ok(a.syncs)
}

/// `POST /api/v1/syncs/ID/cancel`: a `QUEUED` or `RUNNING` job becomes
/// `CANCELED` (`changed`); a finished one stays as it is.
pub async fn cancel_sync(remote: &Remote, id: &str) -> Result<Canceled, Error> {
    check_sync_id(id)?;
    let mut ctx = Ctx::new(remote, Op::Cancel).await?;
    ctx.id = id.to_string();
    let path = format!("{}/cancel", job_path(id));
    let bytes = send(remote, &ctx, Method::POST, &path, None, None).await?;
    decode(&ctx, &bytes)
}

/// Follows job `id` until it is `READY`, `FAILED` or `CANCELED`, asking
/// every `every`, and returns it as it ended (a failed job is a job, not
/// an error). `seen` gets every answer: the job, or a failure to reach the
/// registry that `wait` keeps asking through for up to [`WAIT_PATIENCE`]
/// (a registry that restarts keeps its jobs). Any other error ends the
/// wait. Dropping the future stops waiting; the job goes on.
pub async fn wait(
    remote: &Remote,
    id: &str,
    every: Duration,
    mut seen: impl FnMut(Result<&SyncJob, &Error>),
) -> Result<SyncJob, Error> {
    check_sync_id(id)?;
    let mut ctx = Ctx::new(remote, Op::Get).await?;
    ctx.id = id.to_string();
    let path = job_path(id);
    let mut failing_since: Option<Instant> = None;
    loop {
        match remote.api(Method::GET, &path, None, None).await {
            Ok(answer) => {
                failing_since = None;
                let job: SyncJob = decode(&ctx, &crate::api::answered(&ctx, answer)?)?;
                seen(Ok(&job));
                if job.state.is_finished() {
                    return Ok(job);
                }
            }
            // `Remote::api` already retried: the registry is down or
            // restarting. Jobs survive that; keep asking for a while.
            Err(e) => {
                let e = Error::from(e);
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= WAIT_PATIENCE {
                    return Err(e);
                }
                seen(Err(&e));
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// `POST /api/v1/schedules` (SPEC.md §8.6): stores a schedule that starts
/// `request.sync` every `request.every`, the first run at once.
pub async fn create_schedule(
    remote: &Remote,
    request: &ScheduleRequest,
) -> Result<SyncSchedule, Error> {
    // The registry decides the shortest interval; the syntax is checked here.
    wire::every_seconds(&request.every, 1)?;
    let mut ctx = Ctx::new(remote, Op::Schedule).await?;
    ctx.secret = request.sync.secret.as_ref().map(|s| s.to_string());
    ctx.dest = dest_ref(remote, &request.sync.dest);
    let body = api::to_body(request);
    let bytes = send(
        remote,
        &ctx,
        Method::POST,
        "/schedules",
        Some(&request.sync.dest.name),
        Some(&body),
    )
    .await?;
    decode(&ctx, &bytes)
}

/// `GET /api/v1/schedules[?dest=NAME]`: oldest first, each with its last
/// job.
pub async fn list_schedules(
    remote: &Remote,
    dest: Option<&str>,
) -> Result<Vec<SyncSchedule>, Error> {
    let ctx = Ctx::new(remote, Op::ListSchedules).await?;
    let path = match dest {
        Some(name) => format!("/schedules?dest={}", segment(name)),
        None => "/schedules".to_string(),
    };
    let a: wire::ScheduleList = get(remote, &ctx, &path, None).await?;
    Ok(a.schedules)
}

/// `GET /api/v1/schedules/ID`.
pub async fn schedule(remote: &Remote, id: &str) -> Result<SyncSchedule, Error> {
    check_schedule_id(id)?;
    let mut ctx = Ctx::new(remote, Op::GetSchedule).await?;
    ctx.id = id.to_string();
    get(remote, &ctx, &schedule_path(id), None).await
}

/// `POST /api/v1/schedules/ID/pause` (`paused`) or `…/resume`: whether
/// it changed, and the schedule as it now is. A resumed schedule runs at
/// once.
pub async fn pause_schedule(
    remote: &Remote,
    id: &str,
    paused: bool,
) -> Result<ScheduleChanged, Error> {
    check_schedule_id(id)?;
    let op = if paused { Op::Pause } else { Op::Resume };
    let mut ctx = Ctx::new(remote, op).await?;
    ctx.id = id.to_string();
    let verb = if paused { "pause" } else { "resume" };
    let path = format!("{}/{verb}", schedule_path(id));
    let bytes = send(remote, &ctx, Method::POST, &path, None, None).await?;
    decode(&ctx, &bytes)
}

/// `DELETE /api/v1/schedules/ID`: no more runs (a running job goes on).
pub async fn delete_schedule(remote: &Remote, id: &str) -> Result<(), Error> {
    check_schedule_id(id)?;
    let mut ctx = Ctx::new(remote, Op::DeleteSchedule).await?;
    ctx.id = id.to_string();
    send(remote, &ctx, Method::DELETE, &schedule_path(id), None, None).await?;
    Ok(())
}

/// Checks a schedule id a user typed before it goes into a URL, as
/// [`check_sync_id`] does for jobs.
pub fn check_schedule_id(id: &str) -> Result<(), Error> {
    check_sync_id(id).map_err(|_| {
        Error::Usage(format!(
            "{id:?} is not a schedule id (sched-<16 hex>); `sealvol sync schedule list` shows them"
        ))
    })
}

/// Where a secret may be used (SPEC.md §8.3): the sources it may be sent
/// to, and globs of the destinations whose pushers may use it (none: any).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretBinding {
    pub for_sources: Vec<String>,
    pub dest: Vec<String>,
}

impl SecretBinding {
    /// `?for=…&dest=…`, each value percent-encoded.
    fn query(&self) -> String {
        let pairs = self
            .for_sources
            .iter()
            .map(|v| ("for", v))
            .chain(self.dest.iter().map(|v| ("dest", v)));
        let parts: Vec<String> = pairs.map(|(k, v)| format!("{k}={}", segment(v))).collect();
        format!("?{}", parts.join("&"))
    }

    fn check(&self, name: &SecretName) -> Result<(), Error> {
        if self.for_sources.is_empty() {
            return Err(Error::Usage(format!(
                "secret {name}: say which sources it may be sent to with --for URI (e.g. --for s3://bucket or --for hf://org)"
            )));
        }
        Ok(())
    }
}

/// `PUT /api/v1/secrets/NAME?for=…`: stores `value` (at most
/// [`SECRET_MAX_BYTES`]) on the registry, bound as `binding` says,
/// replacing what the name held. The value travels as raw bytes
/// ([`Remote::api_raw`]).
pub async fn set_secret(
    remote: &Remote,
    name: &SecretName,
    value: &[u8],
    binding: &SecretBinding,
) -> Result<(), Error> {
    binding.check(name)?;
    if value.is_empty() {
        return Err(Error::Usage(format!("secret {name}: the value is empty")));
    }
    if value.len() > SECRET_MAX_BYTES {
        return Err(Error::Usage(format!(
            "secret {name}: the value is {} bytes; a registry keeps at most {SECRET_MAX_BYTES}",
            value.len()
        )));
    }
    put_secret(remote, name, Bytes::copy_from_slice(value), binding).await
}

/// `PUT /api/v1/secrets/NAME?for=…` with no body: binds the stored value
/// anew (a secret stored before binding existed is usable by admins only
/// until then).
pub async fn bind_secret(
    remote: &Remote,
    name: &SecretName,
    binding: &SecretBinding,
) -> Result<(), Error> {
    binding.check(name)?;
    put_secret(remote, name, Bytes::new(), binding).await
}

async fn put_secret(
    remote: &Remote,
    name: &SecretName,
    value: Bytes,
    binding: &SecretBinding,
) -> Result<(), Error> {
    let mut ctx = Ctx::new(remote, Op::SetSecret).await?;
    ctx.secret = Some(name.to_string());
    let path = format!("{}{}", secret_path(name), binding.query());
    let answer = remote
        .api_raw(Method::PUT, &path, None, "application/octet-stream", value)
        .await?;
    crate::api::answered(&ctx, answer)?;
    Ok(())
}

/// `GET /api/v1/secrets`: the registry's secrets, names and bindings.
pub async fn list_secrets(remote: &Remote) -> Result<Vec<wire::SecretInfo>, Error> {
    let ctx = Ctx::new(remote, Op::ListSecrets).await?;
    let a: wire::SecretList = get(remote, &ctx, "/secrets", None).await?;
    Ok(a.secrets)
}

/// `DELETE /api/v1/secrets/NAME`; one the registry does not have is a
/// [`Error::NotFound`].
pub async fn delete_secret(remote: &Remote, name: &SecretName) -> Result<(), Error> {
    let mut ctx = Ctx::new(remote, Op::DeleteSecret).await?;
    ctx.secret = Some(name.to_string());
    send(remote, &ctx, Method::DELETE, &secret_path(name), None, None).await?;
    Ok(())
}

/// Which call failed, for its error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Start,
    Get,
    List,
    Cancel,
    SetSecret,
    ListSecrets,
    DeleteSecret,
    Schedule,
    ListSchedules,
    GetSchedule,
    Pause,
    Resume,
    DeleteSchedule,
}

impl Op {
    /// What a registry without the API "does not support".
    fn what(self) -> &'static str {
        match self {
            Op::Start | Op::Get | Op::List | Op::Cancel => "sync jobs",
            Op::SetSecret | Op::ListSecrets | Op::DeleteSecret => "secrets for sync jobs",
            Op::Schedule
            | Op::ListSchedules
            | Op::GetSchedule
            | Op::Pause
            | Op::Resume
            | Op::DeleteSchedule => "sync schedules",
        }
    }

    /// What was being done, to start a message.
    fn doing(self) -> &'static str {
        match self {
            Op::Start => "starting a sync",
            Op::Get => "reading a sync",
            Op::List => "listing syncs",
            Op::Cancel => "cancelling a sync",
            Op::SetSecret => "storing a secret",
            Op::ListSecrets => "listing secrets",
            Op::DeleteSecret => "deleting a secret",
            Op::Schedule => "making a sync schedule",
            Op::ListSchedules => "listing sync schedules",
            Op::GetSchedule => "reading a sync schedule",
            Op::Pause => "pausing a sync schedule",
            Op::Resume => "resuming a sync schedule",
            Op::DeleteSchedule => "deleting a sync schedule",
        }
    }
}

/// Everything an error message may name.
#[derive(Clone, Debug)]
struct Ctx {
    op: Op,
    registry: String,
    /// The job id, for calls about one job.
    id: String,
    /// The secret's name: the one stored or deleted, or the one a new job
    /// names.
    secret: Option<String>,
    /// The destination as the user would type it, for a new job.
    dest: String,
}

impl Ctx {
    /// Checks that the registry has the volume API at all (asked once per
    /// [`Remote`]); calls on a registry without it fail here.
    async fn new(remote: &Remote, op: Op) -> Result<Ctx, Error> {
        api::require(remote, op.what()).await?;
        Ok(Ctx::bare(remote.registry(), op))
    }

    fn bare(registry: &str, op: Op) -> Ctx {
        Ctx {
            op,
            registry: registry.to_string(),
            id: String::new(),
            secret: None,
            dest: String::new(),
        }
    }
}

impl CallCtx for Ctx {
    const SPEC: &'static str = "§8";
    type Error = Error;

    fn registry(&self) -> &str {
        &self.registry
    }

    fn call(&self) -> String {
        self.op.doing().to_string()
    }

    fn refused(&self, status: u16, body: &[u8]) -> Error {
        failure(self, status, body)
    }
}

/// ` --registry HOST` when `registry` is not the default one, so that the
/// commands a message suggests reach the same registry.
pub fn registry_flag(registry: &str) -> String {
    if registry == VolumeRef::default_registry() {
        String::new()
    } else {
        format!(" --registry {registry}")
    }
}

/// The error for an answer other than 2xx (SPEC.md §7.2's body, §8.3's
/// codes): one line naming the job, secret or registry and what to do.
fn failure(ctx: &Ctx, status: u16, body: &[u8]) -> Error {
    let (code, message) = api::error_code(body);
    let registry = &ctx.registry;
    let message = api::one_line(&message);
    let secret = ctx.secret.as_deref().unwrap_or("");
    match ErrorCode::parse(&code) {
        Some(ErrorCode::SyncUnknown) => Error::NotFound(format!(
            "sync {} not found on registry {registry}",
            ctx.id
        )),
        Some(ErrorCode::ScheduleUnknown) => Error::NotFound(format!(
            "schedule {} not found on registry {registry}; `sealvol sync schedule list{}` shows them",
            ctx.id,
            registry_flag(registry)
        )),
        Some(ErrorCode::SecretUnknown) if matches!(ctx.op, Op::Start | Op::Schedule) => Error::NotFound(format!(
            "secret {secret} not found on registry {registry}; store it first with `sealvol secret set {secret}{}` (the value on standard input)",
            registry_flag(registry)
        )),
        Some(ErrorCode::SecretUnknown) => Error::NotFound(format!(
            "secret {secret} not found on registry {registry}"
        )),
        // SPEC.md §7.2: a malformed tag is INVALID too; there is no
        // code of its own.
        Some(ErrorCode::Invalid | ErrorCode::NameInvalid | ErrorCode::TagReserved) => {
            let what = match ctx.op {
                Op::Start => format!("the sync into {}", ctx.dest),
                Op::Schedule => format!("the sync schedule into {}", ctx.dest),
                Op::SetSecret | Op::DeleteSecret => format!("secret {secret}"),
                op => op.doing().to_string(),
            };
            Error::Usage(format!(
                "registry {registry} refused {what}: {}",
                if message.is_empty() { &code } else { &message }
            ))
        }
        // No such route: no volume API there, or one without §8. The
        // sealvol registry answers UNSUPPORTED for paths it lacks.
        _ if matches!(status, 404 | 405)
            && (code.is_empty() || code == ErrorCode::Unsupported.as_str()) =>
        {
            Error::Transport(TransportError::Unsupported {
                registry: registry.clone(),
                what: format!("{} (its volume API predates them)", ctx.op.what()),
            })
        }
        _ if status == 413 && ctx.op == Op::SetSecret => Error::Usage(format!(
            "secret {secret}: registry {registry} refused the value as too large (at most {SECRET_MAX_BYTES} bytes)"
        )),
        _ => Error::Transport(api::other_failure(
            registry,
            status,
            &code,
            &message,
            ctx.op.doing(),
        )),
    }
}

fn job_path(id: &str) -> String {
    format!("/syncs/{}", segment(id))
}

fn schedule_path(id: &str) -> String {
    format!("/schedules/{}", segment(id))
}

fn secret_path(name: &SecretName) -> String {
    format!("/secrets/{}", segment(name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::secrets::RegistryAuth;
    use serde_json::{json, Value};

    fn hex(byte: &str) -> String {
        byte.repeat(32)
    }

    /// A job as SPEC.md §8.2 writes it.
    fn ready_job() -> Value {
        json!({
            "id": "sync-0123456789abcdef", "state": "READY",
            "source": "hf://Qwen/Qwen3-8B",
            "pinned_source": format!("hf://Qwen/Qwen3-8B@{}", "0f".repeat(20)),
            "dest": {"name": "weights/qwen3-8b", "tag": "prod"},
            "include": ["*.safetensors", "*.json"], "exclude": [], "secret": "hf-token",
            "progress": {"files_done": 7, "files_total": 7, "bytes_done": 16_400_000_000u64,
                         "bytes_total": 16_400_000_000u64, "bytes_stored": 16_000_000_000u64},
            "attempts": 1, "retries": 0, "retrying": null,
            "created_at": "2026-12-02T18:40:00Z", "started_at": "2026-12-02T18:40:01Z",
            "finished_at": "2026-12-02T18:52:13Z",
            "version": {"digest": format!("b3:{}", hex("ab")),
                        "index_digest": format!("sha256:{}", hex("cd"))},
            "error": null
        })
    }

    fn remote(registry: &str) -> Remote {
        Remote::with_auth(registry, false, RegistryAuth::Anonymous).unwrap()
    }

    #[test]
    fn refused_requests_are_usage_errors() {
        // What a destination or secret name may be is sealvol_spec::api's,
        // tested there; here, that a refusal reaches the user as usage.
        let vref: VolumeRef = "bdn:weights/qwen3-8b:head".parse().unwrap();
        let e = Error::from(SyncDest::from_ref(&vref).unwrap_err());
        assert!(matches!(e, Error::Usage(_)), "{e}");
        assert!(
            e.to_string().starts_with("bdn:weights/qwen3-8b:head"),
            "{e}"
        );
        let e = Error::from("a/b".parse::<SecretName>().unwrap_err());
        assert!(matches!(e, Error::Usage(_)), "{e}");
    }

    #[test]
    fn sync_ids_must_be_one_segment() {
        check_sync_id("sync-0123456789abcdef").unwrap();
        for bad in ["", "..", "a/b", "sync 1", "x?y"] {
            assert!(
                matches!(check_sync_id(bad), Err(Error::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn version_refs_are_printed_as_push_prints_them() {
        let job: SyncJob = serde_json::from_value(ready_job()).unwrap();
        let digest = format!("b3:{}", hex("ab"));
        let default = VolumeRef::default_registry();
        assert_eq!(
            version_ref(&remote(&default), &job).unwrap(),
            format!("bdn:weights/qwen3-8b@{digest}")
        );
        assert_eq!(
            dest_ref(&remote(&default), &job.dest),
            "bdn:weights/qwen3-8b:prod"
        );
        assert_eq!(
            version_ref(&remote("reg.example.com:8443"), &job).unwrap(),
            format!("reg.example.com:8443/weights/qwen3-8b@{digest}")
        );
        let mut deep = job.clone();
        deep.dest.name = "org/team/model".into();
        assert_eq!(
            version_ref(&remote(&default), &deep).unwrap(),
            format!("{default}/org/team/model@{digest}")
        );
        let mut queued = job;
        queued.version = None;
        assert_eq!(version_ref(&remote(&default), &queued), None);
    }

    fn body(code: &str, message: &str) -> Vec<u8> {
        json!({"errors":[{"code":code,"message":message,"detail":null}]})
            .to_string()
            .into_bytes()
    }

    fn ctx(op: Op) -> Ctx {
        let mut c = Ctx::bare("reg.example.com", op);
        c.id = "sync-0123456789abcdef".into();
        c.secret = Some("hf-token".into());
        c.dest = "reg.example.com/weights/qwen3-8b:prod".into();
        c
    }

    #[test]
    fn error_bodies_become_one_actionable_line() {
        let e = failure(&ctx(Op::Get), 404, &body("SYNC_UNKNOWN", "no such sync"));
        assert!(matches!(e, Error::NotFound(_)));
        assert_eq!(
            e.to_string(),
            "sync sync-0123456789abcdef not found on registry reg.example.com"
        );
        let e = failure(&ctx(Op::Start), 404, &body("SECRET_UNKNOWN", "x"));
        assert!(matches!(e, Error::NotFound(_)));
        assert!(
            e.to_string().starts_with(
                "secret hf-token not found on registry reg.example.com; store it first with `sealvol secret set hf-token --registry reg.example.com`"
            ),
            "{e}"
        );
        let e = failure(&ctx(Op::DeleteSecret), 404, &body("SECRET_UNKNOWN", "x"));
        assert_eq!(
            e.to_string(),
            "secret hf-token not found on registry reg.example.com"
        );
        let e = failure(
            &ctx(Op::Start),
            400,
            &body("INVALID", "unknown scheme ftp://x\nmore"),
        );
        assert!(matches!(e, Error::Usage(_)));
        assert_eq!(
            e.to_string(),
            "registry reg.example.com refused the sync into reg.example.com/weights/qwen3-8b:prod: unknown scheme ftp://x"
        );
        let e = failure(&ctx(Op::SetSecret), 413, b"too big");
        assert!(matches!(e, Error::Usage(_)), "{e}");
        let e = failure(&ctx(Op::Cancel), 401, &body("UNAUTHORIZED", "log in"));
        assert!(
            matches!(e, Error::Transport(TransportError::Denied { .. })),
            "{e}"
        );
        let e = failure(&ctx(Op::List), 409, &body("SOMETHING_NEW", "words"));
        assert_eq!(
            e.to_string(),
            "registry reg.example.com: listing syncs: HTTP 409 SOMETHING_NEW: words"
        );
    }

    #[test]
    fn registries_without_sync_jobs_say_so() {
        // A §7 registry without §8, and a registry with no API at all.
        for (status, b) in [
            (404, body("UNSUPPORTED", "no such endpoint")),
            (404, b"404 page not found".to_vec()),
            (405, Vec::new()),
        ] {
            let e = failure(&ctx(Op::Start), status, &b);
            assert!(
                matches!(e, Error::Transport(TransportError::Unsupported { .. })),
                "{e}"
            );
            assert_eq!(
                e.to_string(),
                "registry reg.example.com does not support sync jobs (its volume API predates them)"
            );
        }
        let e = failure(&ctx(Op::ListSecrets), 404, b"");
        assert!(e.to_string().contains("does not support secrets"), "{e}");
    }

    #[test]
    fn segments_are_escaped() {
        assert_eq!(segment("weights/qwen3-8b"), "weights%2Fqwen3-8b");
        assert_eq!(segment("hf-token.v2_x"), "hf-token.v2_x");
    }
}
