//! The JSON shapes of SPEC.md §7 (the registry volume API) and §8 (sync
//! jobs): every body under `/api/v1`, serialized by the registry and
//! deserialized by the client from these same types, so the two sides
//! cannot drift apart. Field names and values are the wire's: change one
//! here and SPEC.md changes with it.
//!
//! Times are RFC 3339 UTC strings to the second (SPEC.md §7.2), as the
//! registry formats them; it stores Unix seconds and converts when it
//! answers. Digests are typed: an answer whose `b3:` or `sha256:` digest is
//! malformed does not parse.
//!
//! The registry writes every field of every answer. Fields that are
//! `#[serde(default)]` are those a client may find missing in the answer of
//! a registry of an earlier release (fields added since), or in a request
//! body a person wrote by hand; nothing here is skipped when serializing.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::reference::{Selector, VolumeRef, HEAD};
use crate::{B3Digest, Sha256Digest};

/// The value of `"api"` in `GET /api/v1` of a registry that implements
/// SPEC.md §7.
pub const API: &str = "sealvol.volumes.v1";
/// How long a deleted version stays restorable unless configured (§7.1).
pub const DEFAULT_RETENTION_SECONDS: u64 = 7 * 86_400;
/// How long an unreferenced blob is kept unless configured (§7.4).
pub const DEFAULT_GC_GRACE_SECONDS: u64 = 3_600;
/// How long a push claim lasts without renewal unless configured (§7.4).
pub const DEFAULT_CLAIM_TTL_SECONDS: u64 = 60;

fn default_retention() -> u64 {
    DEFAULT_RETENTION_SECONDS
}

fn default_gc_grace() -> u64 {
    DEFAULT_GC_GRACE_SECONDS
}

fn default_claim_ttl() -> u64 {
    DEFAULT_CLAIM_TTL_SECONDS
}

// ---- §7.3: the volume API ---------------------------------------------------

/// `GET /api/v1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiInfo {
    /// [`API`] on a registry that implements SPEC.md §7.
    pub api: String,
    /// How long a deleted version can be restored.
    #[serde(default = "default_retention")]
    pub retention_seconds: u64,
    #[serde(default = "default_gc_grace")]
    pub gc_grace_seconds: u64,
    /// How long a push claim lasts without renewal.
    #[serde(default = "default_claim_ttl")]
    pub claim_ttl_seconds: u64,
}

/// Whether a version is in the OCI view or deleted (and restorable until
/// its `restorable_until`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Lifecycle {
    Alive,
    Tombstoned,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Alive => "ALIVE",
            Lifecycle::Tombstoned => "TOMBSTONED",
        }
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A volume's head: its most recently sealed alive version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
}

/// `Volume`: a volume as the registry records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// `namespace/volume`.
    pub name: String,
    pub namespace: String,
    /// `null` when no version is alive (or `head` names a manifest that
    /// is not a version, which only a plain OCI client can do).
    #[serde(default)]
    pub head: Option<Head>,
    /// User tags on versions, not `head` or `b3-…`.
    #[serde(default)]
    pub tags: Vec<TagInfo>,
    #[serde(default)]
    pub alive: u64,
    #[serde(default)]
    pub tombstoned: u64,
    /// Alive versions with no user tag that are not head.
    #[serde(default)]
    pub untagged: u64,
    #[serde(default)]
    pub sequence: u64,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// `Version`: one version of a volume, alive or tombstoned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub digest: B3Digest,
    /// Its current index (SPEC.md §7.1, re-publication).
    pub index_digest: Sha256Digest,
    #[serde(default)]
    pub sequence: u64,
    pub lifecycle: Lifecycle,
    #[serde(default)]
    pub is_head: bool,
    /// User tags pointing at it.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub files: Option<u64>,
    /// When the registry first recorded it.
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub tombstoned_at: Option<String>,
    #[serde(default)]
    pub restorable_until: Option<String>,
}

/// `Tag`: a user tag and the version it names. A tag that names a
/// manifest that is not a version is no `Tag` (SPEC.md §7.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagInfo {
    pub tag: String,
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// `Claim`: a push claim (SPEC.md §7.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub token: String,
    #[serde(default)]
    pub holder: String,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default = "default_claim_ttl")]
    pub ttl_seconds: u64,
}

/// `GcReport`: what a garbage collection did, or would do with `dry_run`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GcReport {
    pub dry_run: bool,
    pub versions_purged: u64,
    pub tags_expired: u64,
    pub volumes_expired: u64,
    pub manifests_deleted: u64,
    pub links_removed: u64,
    pub blobs_deleted: u64,
    pub bytes_reclaimed: u64,
    /// Unreferenced blobs kept because they are younger than the grace
    /// period.
    pub blobs_in_grace: u64,
}

/// `GET /api/v1/namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceList {
    pub namespaces: Vec<String>,
}

/// `GET /api/v1/volumes`: by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeList {
    pub volumes: Vec<Volume>,
}

/// `GET /api/v1/volumes/NAME/-/versions`: highest sequence first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionList {
    pub versions: Vec<Version>,
}

/// What kind of entry a tree holds (SPEC.md §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    Dir,
    File,
    Symlink,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Dir => "dir",
            EntryKind::File => "file",
            EntryKind::Symlink => "symlink",
        }
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `Entry`: one entry of a version's tree, as `sealvol ls` and `stat` show
/// it and `GET …/versions/D/entries` answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    pub path: String,
    pub kind: EntryKind,
    /// Permission bits in octal, four digits (`0644`).
    pub mode: String,
    /// A file's size; 0 for the rest.
    pub size: u64,
    /// A file's BLAKE3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<B3Digest>,
    /// How many chunk references a file has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<usize>,
    /// A symlink's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl From<&crate::tree::Entry> for EntryInfo {
    fn from(e: &crate::tree::Entry) -> EntryInfo {
        use crate::tree::EntryData;
        let (kind, blake3, chunks, target) = match &e.data {
            EntryData::Dir => (EntryKind::Dir, None, None, None),
            EntryData::File { blake3, chunks, .. } => {
                (EntryKind::File, Some(*blake3), Some(chunks.len()), None)
            }
            EntryData::Symlink { target } => (EntryKind::Symlink, None, None, Some(target.clone())),
        };
        EntryInfo {
            path: e.path.clone(),
            kind,
            mode: format!("{:04o}", e.mode),
            size: e.data.size(),
            blake3,
            chunks,
            target,
        }
    }
}

/// `GET /api/v1/volumes/NAME/-/versions/DIGEST/entries?path=P`: the
/// entries directly inside directory `P` (the root when absent) in
/// canonical order, a page at a time (SPEC.md §7.2, pagination).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryList {
    /// The directory listed, `""` for the root.
    #[serde(default)]
    pub path: String,
    pub entries: Vec<EntryInfo>,
}

/// `GET /api/v1/volumes/NAME/-/stats`: what a volume's versions hold and
/// what storing them costs after deduplication, over its alive versions
/// and the deleted ones still restorable (those garbage collection keeps).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStats {
    pub name: String,
    /// Versions counted.
    pub versions: u64,
    /// The sum of their sizes: what a copy of each would take.
    pub logical_bytes: u64,
    /// The sum of the sizes of their distinct chunks: what the registry
    /// stores for them (tree indexes and manifests aside).
    pub stored_bytes: u64,
    /// Their distinct chunks.
    pub chunks: u64,
}

/// `GET /api/v1/whoami[?repository=NAME]`: who the registry takes the
/// caller for, and what it may do, so that a client (the web view) shows
/// only what will be allowed. The API still decides every request itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    /// The user or key id, or `anonymous`.
    pub subject: String,
    pub anonymous: bool,
    pub admin: bool,
    /// Whether the registry checks credentials at all (SPEC.md §7.5).
    #[serde(default)]
    pub authentication: bool,
    /// The repository asked about, if any.
    #[serde(default)]
    pub repository: Option<String>,
    /// What the subject may do to it: empty without one.
    #[serde(default)]
    pub actions: Vec<Action>,
}

/// `DELETE /api/v1/volumes/NAME`: the versions it deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstoned {
    pub tombstoned: Vec<Version>,
}

/// The body of `PATCH /api/v1/volumes/NAME`; `null` clears the expiry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumePatch {
    pub expires_at: Option<String>,
}

/// The body of `PUT /api/v1/volumes/NAME/-/tags/TAG`: `digest` is a full
/// `b3:` or `sha256:` digest of an alive version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagRequest {
    pub digest: String,
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// The body of `POST /api/v1/volumes/NAME/-/claim`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    #[serde(default)]
    pub holder: String,
}

// ---- §8: sync jobs ----------------------------------------------------------

/// Where a job is. `READY`, `FAILED` and `CANCELED` are final.
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

/// A sync request SPEC.md §8 does not allow, found before it is sent; the
/// message names it and says what to give instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(String);

/// `dest`: the volume a job writes, and the tag it moves besides `head`
/// and `b3-<hex>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncDest {
    /// `namespace/volume`.
    pub name: String,
    #[serde(default)]
    pub tag: Option<String>,
}

impl SyncDest {
    /// The destination a ref names: `bdn:ns/vol` or `bdn:ns/vol:tag` (or
    /// the qualified forms; the registry is the caller's business). A
    /// digest, a path or a reserved tag (`head`, `b3-…`) is refused.
    pub fn from_ref(vref: &VolumeRef) -> Result<SyncDest, RequestError> {
        let volume = vref.with_selector(Selector::Head);
        if vref.path.is_some() {
            return Err(RequestError(format!(
                "{vref}: a sync destination names a volume, not a path inside it; give {volume} or {volume}:TAG"
            )));
        }
        let tag = match &vref.selector {
            Selector::Head => None,
            Selector::Tag(t) if t.is_digest_tag() || t.as_str() == HEAD => {
                return Err(RequestError(format!(
                    "{vref}: tag {t} is reserved (head always moves to the new version); give {volume} or {volume}:TAG"
                )))
            }
            Selector::Tag(t) => Some(t.as_str().to_string()),
            Selector::Digest(_) => {
                return Err(RequestError(format!(
                    "{vref}: a version's digest comes from its content; sync into {volume} or {volume}:TAG"
                )))
            }
        };
        Ok(SyncDest {
            name: vref.repository(),
            tag,
        })
    }
}

/// `progress`: how far a job got. Totals are 0 until the source is listed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncProgress {
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Chunk bytes this job wrote (those the registry did not hold yet).
    pub bytes_stored: u64,
    /// Files (and their bytes) taken from an earlier job's record without
    /// reading them (SPEC.md §8.5); counted in `files_done`/`bytes_done`.
    pub files_reused: u64,
    pub bytes_reused: u64,
}

/// `version`: what a `READY` job sealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncedVersion {
    pub digest: B3Digest,
    pub index_digest: Sha256Digest,
}

/// `error`: why a job `FAILED`, a code of SPEC.md §8.2's table and a
/// message that names the source.
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

/// `SyncJob`: a job as the API shows it.
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
    /// The schedule that started the job (SPEC.md §8.6); `null` for a job
    /// a caller started.
    #[serde(default)]
    pub schedule: Option<String>,
}

/// The body of `POST /api/v1/syncs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRequest {
    pub source: String,
    pub dest: SyncDest,
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub secret: Option<SecretName>,
}

/// `GET /api/v1/syncs`: newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncList {
    pub syncs: Vec<SyncJob>,
}

/// `POST /api/v1/syncs/ID/cancel`: whether the job changed (it had not
/// finished yet), and the job as it is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canceled {
    pub changed: bool,
    pub sync: SyncJob,
}

/// The body of `POST /api/v1/schedules` (SPEC.md §8.6): a sync request
/// and how often to run it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRequest {
    #[serde(flatten)]
    pub sync: SyncRequest,
    /// A duration as `10m`, `1h 30m` or `1d`: from 1 minute (unless the
    /// registry allows less) to 30 days.
    pub every: String,
}

impl ScheduleRequest {
    /// The shortest interval a registry allows unless its admin says
    /// otherwise: a schedule that lists its source more often costs the
    /// source more than a checkpoint is worth.
    pub const MIN_EVERY: u64 = 60;
    /// The longest: 30 days.
    pub const MAX_EVERY: u64 = 30 * 86_400;
}

/// `every` (`10m`, `1h 30m`, `1d`) in whole seconds, at least `min` and at
/// most [`ScheduleRequest::MAX_EVERY`].
pub fn every_seconds(every: &str, min: u64) -> Result<u64, RequestError> {
    let d = humantime::parse_duration(every.trim()).map_err(|e| {
        RequestError(format!(
            "every {every:?} is not a duration ({e}); write it as 10m, 1h or 1d"
        ))
    })?;
    let secs = d.as_secs();
    let max = ScheduleRequest::MAX_EVERY;
    if d.subsec_nanos() != 0 || secs < min.max(1) || secs > max {
        return Err(RequestError(format!(
            "every {every}: a schedule runs every {} to {}, in whole seconds",
            every_text(min.max(1)),
            every_text(max)
        )));
    }
    Ok(secs)
}

/// `secs` as `every` is written back: `10m`, `1h 30m`.
pub fn every_text(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs))
        .to_string()
        .replace(' ', "")
}

/// `SyncSchedule`: a schedule as the API shows it (SPEC.md §8.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncSchedule {
    /// `sched-<16 hex>`.
    pub id: String,
    /// What each run asks for.
    #[serde(flatten)]
    pub sync: SyncRequest,
    /// The interval as the registry writes it (`10m`).
    pub every: String,
    pub every_seconds: u64,
    /// A paused schedule starts no job until resumed.
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub created_at: Option<String>,
    /// When it next starts a job; `null` while paused.
    #[serde(default)]
    pub next_run_at: Option<String>,
    /// Jobs it started.
    #[serde(default)]
    pub runs: u64,
    /// Times it was due while its last job still ran, and so started none.
    #[serde(default)]
    pub skipped: u64,
    /// The last job it started, as it is now.
    #[serde(default)]
    pub last_run: Option<SyncJob>,
}

/// `GET /api/v1/schedules`: oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleList {
    pub schedules: Vec<SyncSchedule>,
}

/// `POST /api/v1/schedules/ID/pause` and `…/resume`: whether the schedule
/// changed, and the schedule as it is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleChanged {
    pub changed: bool,
    pub schedule: SyncSchedule,
}

/// A secret's name: 1–64 of `[A-Za-z0-9._-]`, other than `.` and `..`
/// (SPEC.md §8.3). Checked when parsed and when deserialized.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct SecretName(String);

impl SecretName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SecretName {
    type Err = RequestError;
    fn from_str(s: &str) -> Result<SecretName, RequestError> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            // "." and ".." would be path segments, not names.
            && s != "."
            && s != "..";
        if ok {
            Ok(SecretName(s.to_string()))
        } else {
            Err(RequestError(format!(
                "{s:?} is not a valid secret name: use 1 to 64 of A-Z a-z 0-9 . _ -"
            )))
        }
    }
}

impl TryFrom<String> for SecretName {
    type Error = RequestError;
    fn try_from(s: String) -> Result<SecretName, RequestError> {
        s.parse()
    }
}

impl From<SecretName> for String {
    fn from(s: SecretName) -> String {
        s.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A secret as listed (SPEC.md §8.3): its name and what it is bound to,
/// never its value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    pub name: String,
    /// The sources it may be sent to; empty for a secret stored before
    /// binding existed, which only an admin's jobs may use until rebound.
    #[serde(rename = "for", default)]
    pub for_sources: Vec<String>,
    /// Globs of the destinations whose pushers may use it; empty: any.
    #[serde(default)]
    pub dest: Vec<String>,
}

/// `GET /api/v1/secrets`: names and bindings; values never leave the
/// registry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

// ---- access and API keys (§7.5) ----------------------------------------------

/// What a subject may do to a repository (SPEC.md §7.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Read blobs, manifests, tags, versions.
    Pull,
    /// Upload, put manifests and tags, move tags, hold push claims, sync.
    Push,
    /// Delete manifests and tags, delete, restore and expire versions.
    Delete,
}

impl Action {
    pub const ALL: [Action; 3] = [Action::Pull, Action::Push, Action::Delete];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pull => "pull",
            Action::Push => "push",
            Action::Delete => "delete",
        }
    }
}

impl FromStr for Action {
    type Err = RequestError;
    fn from_str(s: &str) -> Result<Action, RequestError> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| RequestError(format!("unknown action {s:?}: pull, push or delete")))
    }
}

/// The prefix of an API key's id, which is its user name in Basic auth;
/// no htpasswd user may start with it.
pub const API_KEY_PREFIX: &str = "svk_";

/// An API key as listed (SPEC.md §7.5): never its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// `svk_` and 16 hex digits: the user name the key logs in with.
    pub id: String,
    /// Globs over repository names, as in the policy.
    pub repositories: Vec<String>,
    pub actions: Vec<Action>,
    /// Who created it.
    pub created_by: String,
    pub created_at: String,
    /// When it stops working; `null` never.
    pub expires_at: Option<String>,
}

/// `POST /api/v1/keys`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRequest {
    pub repositories: Vec<String>,
    pub actions: Vec<Action>,
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// The answer to `POST /api/v1/keys`: the only time the secret is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewApiKey {
    #[serde(flatten)]
    pub key: ApiKey,
    /// The password to log in with, user name `id`.
    pub secret: String,
}

/// `GET /api/v1/keys`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyList {
    pub keys: Vec<ApiKey>,
}

// ---- errors (§7.2, §8.3) ----------------------------------------------------

/// Every code the registry puts in an error body: those of the OCI
/// distribution spec (v1.1, "Error Codes"), which `/v2` answers with and
/// `/api/v1` shares (`UNSUPPORTED` for a path or method it lacks), then
/// those of SPEC.md §7.2 and §8.3. HTTP statuses are the registry's
/// business; SPEC.md's tables give them.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    BlobUnknown,
    BlobUploadInvalid,
    BlobUploadUnknown,
    DigestInvalid,
    ManifestBlobUnknown,
    ManifestInvalid,
    ManifestUnknown,
    NameInvalid,
    NameUnknown,
    SizeInvalid,
    Unauthorized,
    Denied,
    Unsupported,
    // The distribution spec spells this one without underscores.
    #[serde(rename = "TOOMANYREQUESTS")]
    TooManyRequests,
    // The volume API (SPEC.md §7.2).
    Invalid,
    TagReserved,
    VolumeUnknown,
    VersionUnknown,
    TagUnknown,
    ClaimUnknown,
    PathUnknown,
    PushInProgress,
    NotDeleted,
    RetentionExpired,
    // Sync jobs, secrets and schedules (SPEC.md §8.3, §8.6).
    SyncUnknown,
    SecretUnknown,
    ScheduleUnknown,
    // API keys (SPEC.md §7.5).
    KeyUnknown,
}

impl ErrorCode {
    /// Every code, for parsing and tests.
    pub const ALL: [ErrorCode; 28] = [
        ErrorCode::BlobUnknown,
        ErrorCode::BlobUploadInvalid,
        ErrorCode::BlobUploadUnknown,
        ErrorCode::DigestInvalid,
        ErrorCode::ManifestBlobUnknown,
        ErrorCode::ManifestInvalid,
        ErrorCode::ManifestUnknown,
        ErrorCode::NameInvalid,
        ErrorCode::NameUnknown,
        ErrorCode::SizeInvalid,
        ErrorCode::Unauthorized,
        ErrorCode::Denied,
        ErrorCode::Unsupported,
        ErrorCode::TooManyRequests,
        ErrorCode::Invalid,
        ErrorCode::TagReserved,
        ErrorCode::VolumeUnknown,
        ErrorCode::VersionUnknown,
        ErrorCode::TagUnknown,
        ErrorCode::ClaimUnknown,
        ErrorCode::PathUnknown,
        ErrorCode::PushInProgress,
        ErrorCode::NotDeleted,
        ErrorCode::RetentionExpired,
        ErrorCode::SyncUnknown,
        ErrorCode::SecretUnknown,
        ErrorCode::ScheduleUnknown,
        ErrorCode::KeyUnknown,
    ];

    /// The code as it is written on the wire (as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BlobUnknown => "BLOB_UNKNOWN",
            ErrorCode::BlobUploadInvalid => "BLOB_UPLOAD_INVALID",
            ErrorCode::BlobUploadUnknown => "BLOB_UPLOAD_UNKNOWN",
            ErrorCode::DigestInvalid => "DIGEST_INVALID",
            ErrorCode::ManifestBlobUnknown => "MANIFEST_BLOB_UNKNOWN",
            ErrorCode::ManifestInvalid => "MANIFEST_INVALID",
            ErrorCode::ManifestUnknown => "MANIFEST_UNKNOWN",
            ErrorCode::NameInvalid => "NAME_INVALID",
            ErrorCode::NameUnknown => "NAME_UNKNOWN",
            ErrorCode::SizeInvalid => "SIZE_INVALID",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::Denied => "DENIED",
            ErrorCode::Unsupported => "UNSUPPORTED",
            ErrorCode::TooManyRequests => "TOOMANYREQUESTS",
            ErrorCode::Invalid => "INVALID",
            ErrorCode::TagReserved => "TAG_RESERVED",
            ErrorCode::VolumeUnknown => "VOLUME_UNKNOWN",
            ErrorCode::VersionUnknown => "VERSION_UNKNOWN",
            ErrorCode::TagUnknown => "TAG_UNKNOWN",
            ErrorCode::ClaimUnknown => "CLAIM_UNKNOWN",
            ErrorCode::PathUnknown => "PATH_UNKNOWN",
            ErrorCode::PushInProgress => "PUSH_IN_PROGRESS",
            ErrorCode::NotDeleted => "NOT_DELETED",
            ErrorCode::RetentionExpired => "RETENTION_EXPIRED",
            ErrorCode::SyncUnknown => "SYNC_UNKNOWN",
            ErrorCode::SecretUnknown => "SECRET_UNKNOWN",
            ErrorCode::ScheduleUnknown => "SCHEDULE_UNKNOWN",
            ErrorCode::KeyUnknown => "KEY_UNKNOWN",
        }
    }

    /// The code `s` spells, if it is one of these; other registries (and
    /// later releases) may send codes this one does not know.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The distribution error body every refusal carries:
/// `{"errors":[{"code":"…","message":"…","detail":null}]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub errors: Vec<ErrorItem>,
}

/// One error of an [`ErrorBody`]. `code` stays a string so that a code
/// this release does not know still reaches the user as it came;
/// [`ErrorItem::known_code`] reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorItem {
    pub code: String,
    #[serde(default)]
    pub message: String,
    /// Always `null` from this registry; the distribution spec lets others
    /// put any JSON here.
    #[serde(default)]
    pub detail: Option<serde_json::Value>,
}

impl ErrorBody {
    /// The body of one error, as the registry answers it.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            errors: vec![ErrorItem {
                code: code.as_str().to_string(),
                message: message.into(),
                detail: None,
            }],
        }
    }
}

impl ErrorItem {
    pub fn known_code(&self) -> Option<ErrorCode> {
        ErrorCode::parse(&self.code)
    }
}

#[cfg(test)]
mod schedule_tests {
    use super::*;

    #[test]
    fn intervals_are_durations_within_bounds() {
        assert_eq!(every_seconds("10m", 60).unwrap(), 600);
        assert_eq!(every_seconds("1h 30m", 60).unwrap(), 5400);
        assert_eq!(every_seconds(" 1d ", 60).unwrap(), 86_400);
        assert_eq!(every_seconds("5s", 5).unwrap(), 5);
        for bad in ["", "10", "soon", "30s", "1500ms", "31d", "-1m"] {
            let e = every_seconds(bad, 60).unwrap_err().to_string();
            assert!(e.contains("every"), "{bad:?}: {e}");
        }
        assert_eq!(every_text(600), "10m");
        assert_eq!(every_text(5400), "1h30m");
        assert_eq!(every_seconds(&every_text(5400), 60).unwrap(), 5400);
    }

    #[test]
    fn a_schedule_request_is_a_sync_request_and_an_interval() {
        let r: ScheduleRequest = serde_json::from_str(
            r#"{"source":"s3://b/run-42","dest":{"name":"ckpt/run-42","tag":"latest"},"every":"10m"}"#,
        )
        .unwrap();
        assert_eq!(r.sync.source, "s3://b/run-42");
        assert_eq!(r.sync.dest.tag.as_deref(), Some("latest"));
        assert_eq!(r.every, "10m");
        let back: ScheduleRequest =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
