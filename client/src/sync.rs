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

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::Method;
use sealvol_spec::reference::{Selector, Tag, VolumeRef, HEAD};
use sealvol_spec::{B3Digest, DigestSelector, Sha256Digest};
use serde::{Deserialize, Serialize};

use crate::lifecycle::{self, decode, get, segment, send, CallCtx};
use crate::remote::{Remote, TransportError};
use crate::resolve::display_ref;
use crate::Error;

/// How often [`wait`] asks for a job by default.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How long [`wait`] keeps asking a registry it cannot reach (one that
/// restarts keeps its jobs, SPEC.md §8.2) before it gives up.
pub const WAIT_PATIENCE: Duration = Duration::from_secs(60);

/// The largest secret value a registry accepts (SPEC.md §8.3).
pub const SECRET_MAX_BYTES: usize = 64 * 1024;

/// Where a job is (SPEC.md §8.2). `READY`, `FAILED` and `CANCELED` are
/// final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SyncState {
    Queued,
    Running,
    Ready,
    Failed,
    Canceled,
}

impl SyncState {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Queued => "QUEUED",
            SyncState::Running => "RUNNING",
            SyncState::Ready => "READY",
            SyncState::Failed => "FAILED",
            SyncState::Canceled => "CANCELED",
        }
    }

    /// Whether the job is over: nothing about it changes any more.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            SyncState::Ready | SyncState::Failed | SyncState::Canceled
        )
    }
}

impl fmt::Display for SyncState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The volume a job writes, and the tag it moves besides `head` and
/// `b3-<hex>` (SPEC.md §8.2 `dest`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncDest {
    /// `namespace/volume`.
    pub name: String,
    #[serde(default)]
    pub tag: Option<String>,
}

impl SyncDest {
    /// The destination a ref names: `bdn:ns/vol` or `bdn:ns/vol:tag` (or
    /// the qualified forms; the registry is the caller's business). A
    /// digest, a path or a reserved tag (`head`, `b3-…`) is a usage error.
    pub fn from_ref(vref: &VolumeRef) -> Result<SyncDest, Error> {
        let volume = vref.with_selector(Selector::Head);
        if vref.path.is_some() {
            return Err(Error::Usage(format!(
                "{vref}: a sync destination names a volume, not a path inside it; give {volume} or {volume}:TAG"
            )));
        }
        let tag = match &vref.selector {
            Selector::Head => None,
            Selector::Tag(t) if t.is_digest_tag() || t.as_str() == HEAD => {
                return Err(Error::Usage(format!(
                    "{vref}: tag {t} is reserved (head always moves to the new version); give {volume} or {volume}:TAG"
                )))
            }
            Selector::Tag(t) => Some(t.as_str().to_string()),
            Selector::Digest(_) => {
                return Err(Error::Usage(format!(
                    "{vref}: a version's digest comes from its content; sync into {volume} or {volume}:TAG"
                )))
            }
        };
        Ok(SyncDest {
            name: vref.repository(),
            tag,
        })
    }

    /// The destination as a ref on `registry` (`ns/vol:tag` with the
    /// registry's host), or `None` for a name that is not `ns/vol`.
    fn volume_ref(&self, registry: &str, selector: Selector) -> Option<VolumeRef> {
        let (namespace, volume) = self.name.rsplit_once('/')?;
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
}

/// How far a job got (SPEC.md §8.2 `progress`). Totals are 0 until the
/// source is listed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncProgress {
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Chunk bytes this job wrote (those the registry did not hold yet).
    pub bytes_stored: u64,
}

/// The version a `READY` job sealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncedVersion {
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
}

/// Why a job `FAILED`: a code of SPEC.md §8.2's table and a message that
/// names the source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(&self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

/// A sync job as the registry records it (SPEC.md §8.2 `SyncJob`). Times
/// are RFC 3339 UTC strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncJob {
    /// `sync-<16 hex>`.
    pub id: String,
    pub state: SyncState,
    /// The source URI (SPEC.md §8.1).
    pub source: String,
    /// The source pinned to what the job first listed (a Hub branch's
    /// commit), once it has listed.
    #[serde(default)]
    pub pinned_source: Option<String>,
    pub dest: SyncDest,
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The name of the secret the job reads, never its value.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub progress: SyncProgress,
    /// Times a worker started the job (a registry restart starts it again).
    #[serde(default)]
    pub attempts: u64,
    /// Transient errors retried so far.
    #[serde(default)]
    pub retries: u64,
    /// The last transient error the job is retrying through.
    #[serde(default)]
    pub retrying: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// Set when `READY`.
    #[serde(default)]
    pub version: Option<SyncedVersion>,
    /// Set when `FAILED`.
    #[serde(default)]
    pub error: Option<JobError>,
}

/// What `POST /api/v1/syncs` takes (SPEC.md §8.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SyncRequest {
    pub source: String,
    pub dest: SyncDest,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub secret: Option<SecretName>,
}

/// What `POST /api/v1/syncs/ID/cancel` answers: whether the job changed
/// (it had not finished yet), and the job as it is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canceled {
    pub changed: bool,
    pub sync: SyncJob,
}

/// A secret's name: 1–64 of `[A-Za-z0-9._-]` (SPEC.md §8.3).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct SecretName(String);

impl SecretName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SecretName {
    type Err = Error;
    fn from_str(s: &str) -> Result<SecretName, Error> {
        let ok = (1..=64).contains(&s.len())
            && s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            // "." and ".." would be path segments, not names.
            && s != "."
            && s != "..";
        if ok {
            Ok(SecretName(s.to_string()))
        } else {
            Err(Error::Usage(format!(
                "{s:?} is not a valid secret name: use 1 to 64 of A-Z a-z 0-9 . _ -"
            )))
        }
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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
    Some(match job.dest.volume_ref(remote.registry(), selector) {
        Some(r) => display_ref(remote, &r),
        // Not `ns/vol`: show what the registry said.
        None => format!("{}@{}", job.dest.name, v.digest),
    })
}

/// The job's destination as a ref with its tag (`bdn:ns/vol:prod`).
pub fn dest_ref(remote: &Remote, dest: &SyncDest) -> String {
    let selector = match dest.tag.as_deref().map(Tag::from_str) {
        Some(Ok(t)) => Selector::Tag(t),
        _ => Selector::Head,
    };
    match dest.volume_ref(remote.registry(), selector) {
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
    let body = serde_json::to_value(request).expect("a request serializes");
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
    #[derive(Deserialize)]
    struct Answer {
        syncs: Vec<SyncJob>,
    }
    let ctx = Ctx::new(remote, Op::List).await?;
    let path = match dest {
        Some(name) => format!("/syncs?dest={}", segment(name)),
        None => "/syncs".to_string(),
    };
    let a: Answer = get(remote, &ctx, &path, None).await?;
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
                let job: SyncJob = decode(&ctx, &lifecycle::answered(&ctx, answer)?)?;
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

/// `PUT /api/v1/secrets/NAME`: stores `value` (at most
/// [`SECRET_MAX_BYTES`]) on the registry, replacing what the name held.
/// The value travels as raw bytes ([`Remote::api_raw`]).
pub async fn set_secret(remote: &Remote, name: &SecretName, value: &[u8]) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::Usage(format!("secret {name}: the value is empty")));
    }
    if value.len() > SECRET_MAX_BYTES {
        return Err(Error::Usage(format!(
            "secret {name}: the value is {} bytes; a registry keeps at most {SECRET_MAX_BYTES}",
            value.len()
        )));
    }
    let mut ctx = Ctx::new(remote, Op::SetSecret).await?;
    ctx.secret = Some(name.to_string());
    let value = Bytes::copy_from_slice(value);
    let answer = remote
        .api_raw(
            Method::PUT,
            &secret_path(name),
            None,
            "application/octet-stream",
            value,
        )
        .await?;
    lifecycle::answered(&ctx, answer)?;
    Ok(())
}

/// `GET /api/v1/secrets`: the names of the secrets the registry holds.
pub async fn list_secrets(remote: &Remote) -> Result<Vec<String>, Error> {
    #[derive(Deserialize)]
    struct Answer {
        secrets: Vec<String>,
    }
    let ctx = Ctx::new(remote, Op::ListSecrets).await?;
    let a: Answer = get(remote, &ctx, "/secrets", None).await?;
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
}

impl Op {
    /// What a registry without the API "does not support".
    fn what(self) -> &'static str {
        match self {
            Op::Start | Op::Get | Op::List | Op::Cancel => "sync jobs",
            Op::SetSecret | Op::ListSecrets | Op::DeleteSecret => "secrets for sync jobs",
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
        lifecycle::require(remote, op.what()).await?;
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
    let (code, message) = lifecycle::error_code(body);
    let registry = &ctx.registry;
    let message = lifecycle::one_line(&message);
    let secret = ctx.secret.as_deref().unwrap_or("");
    match code.as_str() {
        "SYNC_UNKNOWN" => Error::NotFound(format!(
            "sync {} not found on registry {registry}",
            ctx.id
        )),
        "SECRET_UNKNOWN" if ctx.op == Op::Start => Error::NotFound(format!(
            "secret {secret} not found on registry {registry}; store it first with `sealvol secret set {secret}{}` (the value on standard input)",
            registry_flag(registry)
        )),
        "SECRET_UNKNOWN" => Error::NotFound(format!(
            "secret {secret} not found on registry {registry}"
        )),
        "INVALID" | "NAME_INVALID" | "TAG_RESERVED" | "TAG_INVALID" => {
            let what = match ctx.op {
                Op::Start => format!("the sync into {}", ctx.dest),
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
        _ if matches!(status, 404 | 405) && (code.is_empty() || code == "UNSUPPORTED") => {
            Error::Transport(TransportError::Unsupported {
                registry: registry.clone(),
                what: format!("{} (its volume API predates them)", ctx.op.what()),
            })
        }
        _ if status == 413 && ctx.op == Op::SetSecret => Error::Usage(format!(
            "secret {secret}: registry {registry} refused the value as too large (at most {SECRET_MAX_BYTES} bytes)"
        )),
        _ => Error::Transport(lifecycle::other_failure(
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

    fn dest(s: &str) -> Result<SyncDest, Error> {
        SyncDest::from_ref(&s.parse().unwrap())
    }

    #[test]
    fn jobs_parse_as_the_spec_writes_them_and_print_back() {
        let job: SyncJob = serde_json::from_value(ready_job()).unwrap();
        assert_eq!(job.state, SyncState::Ready);
        assert!(job.state.is_finished());
        assert_eq!(job.dest.tag.as_deref(), Some("prod"));
        assert_eq!(job.progress.files_total, 7);
        assert_eq!(serde_json::to_value(&job).unwrap(), ready_job());
        let failed: SyncJob = serde_json::from_value(json!({
            "id": "sync-00000000000000ff", "state": "FAILED", "source": "s3://b/p",
            "dest": {"name": "ns/vol", "tag": null},
            "progress": {"files_done": 0, "files_total": 0, "bytes_done": 0,
                         "bytes_total": 0, "bytes_stored": 0},
            "attempts": 1, "retrying": null, "created_at": "2026-12-02T18:40:00Z",
            "started_at": null, "finished_at": "2026-12-02T18:40:02Z", "version": null,
            "error": {"code": "SOURCE_DENIED", "message": "s3://b/p: access denied"}
        }))
        .unwrap();
        assert_eq!(
            failed.error.unwrap().to_string(),
            "SOURCE_DENIED: s3://b/p: access denied"
        );
        for (s, state) in [
            ("QUEUED", SyncState::Queued),
            ("RUNNING", SyncState::Running),
            ("CANCELED", SyncState::Canceled),
        ] {
            assert_eq!(
                serde_json::from_value::<SyncState>(json!(s)).unwrap(),
                state
            );
            assert_eq!(state.to_string(), s);
        }
        assert!(!SyncState::Running.is_finished());
    }

    #[test]
    fn requests_are_the_body_of_post_syncs() {
        let r = SyncRequest {
            source: "hf://Qwen/Qwen3-8B".into(),
            dest: dest("bdn:weights/qwen3-8b").unwrap(),
            include: vec!["*.json".into()],
            exclude: vec![],
            secret: Some("hf-token".parse().unwrap()),
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"source": "hf://Qwen/Qwen3-8B",
                   "dest": {"name": "weights/qwen3-8b", "tag": null},
                   "include": ["*.json"], "exclude": [], "secret": "hf-token"})
        );
    }

    #[test]
    fn destinations_are_a_volume_and_maybe_a_tag() {
        let d = dest("bdn:weights/qwen3-8b:prod").unwrap();
        assert_eq!(d.name, "weights/qwen3-8b");
        assert_eq!(d.tag.as_deref(), Some("prod"));
        let d = dest("127.0.0.1:5000/weights/qwen3-8b").unwrap();
        assert_eq!((d.name.as_str(), d.tag), ("weights/qwen3-8b", None));
        let d = dest("registry.example.com/org/team/model:v2").unwrap();
        assert_eq!(d.name, "org/team/model");
        for bad in [
            "bdn:weights/qwen3-8b@b3:0123456789ab",
            "bdn:weights/qwen3-8b:prod/config.json",
            "bdn:weights/qwen3-8b/config.json",
            "bdn:weights/qwen3-8b:head",
        ] {
            let e = dest(bad).unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{bad}: {e}");
            assert!(e.to_string().starts_with(bad), "{bad}: {e}");
        }
        let digest_tag = format!("bdn:weights/qwen3-8b:b3-{}", hex("ab"));
        assert!(matches!(dest(&digest_tag), Err(Error::Usage(_))));
    }

    #[test]
    fn secret_names_follow_the_spec() {
        for ok in ["hf-token", "a", "AWS.prod_key-2", &"x".repeat(64)] {
            assert_eq!(ok.parse::<SecretName>().unwrap().as_str(), ok);
        }
        for bad in ["", "..", ".", "a/b", "a b", "tök", "x=1", &"x".repeat(65)] {
            let e = bad.parse::<SecretName>().unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{bad:?}");
            assert!(e.to_string().contains("1 to 64"), "{e}");
        }
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
