//! Sync jobs and secrets as the registry stores them (SPEC.md §8): one row
//! per job, one row per file a running job has finished (so a restart
//! re-reads only the rest), one row per file by its source identity (so a
//! later job takes it unread, §8.5), one row per secret, sealed and bound
//! ([`crate::store::meta::secrets`]). Each state change is one transaction;
//! [`crate::service::syncs::runner`] runs the jobs.

use std::collections::{HashMap, HashSet};

use crate::store::meta::engine::{Bytes, ReadableTable, WriteTransaction};
use sealvol_spec::chain::{self, PieceCv};
use sealvol_spec::{api, B3Digest, ChunkRef, ChunkingParams};
use serde::{Deserialize, Serialize};

use crate::clock::rfc3339;
use crate::store::meta::db::MetaStore;
use crate::store::meta::error::Result;
use crate::store::meta::schema::{
    key, prefix, PLAINTEXT_SECRETS, SECRETS, SYNC_FILES, SYNC_JOBS, SYNC_REUSE,
};
use crate::store::meta::secrets::{SecretKey, StoredSecret};

// A stored job holds these as the API writes them; the storage format is
// therefore theirs too, which `stored_jobs_still_read` pins.
pub use sealvol_spec::api::{JobError, SyncDest, SyncProgress, SyncState, SyncedVersion};

/// A job as stored; [`SyncJob::view`] is its API form (SPEC.md §8.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncJob {
    pub id: String,
    /// Creation order, for "newest first".
    pub seq: u64,
    pub state: SyncState,
    pub source: String,
    /// `source` pinned to what the first listing read (a Hub branch's
    /// commit); later runs of the job read this.
    #[serde(default)]
    pub pinned_source: Option<String>,
    pub dest: SyncDest,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub secret: Option<String>,
    /// Whether an admin started the job: a secret bound to no source is
    /// theirs alone to use (SPEC.md §8.3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_admin: bool,
    pub progress: SyncProgress,
    /// Times a worker started the job (a restart starts it again).
    pub attempts: u64,
    /// Transient errors retried so far.
    #[serde(default)]
    pub retries: u64,
    pub retrying: Option<String>,
    pub created_at: u64,
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
    pub version: Option<SyncedVersion>,
    pub error: Option<JobError>,
    /// Which registry process runs it, and until when: a `RUNNING` job
    /// whose lease lapsed (its replica died) is taken by another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// The schedule that started it (SPEC.md §8.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

/// A worker's hold on a running job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The registry process (its replica id).
    pub holder: String,
    /// Unix seconds; renewed while the job runs.
    pub until: u64,
}

impl SyncJob {
    /// A new job, `QUEUED`, as `request` asks; `by_admin` says whether an
    /// admin asked (SPEC.md §8.3). Its `seq` is set when it is stored.
    pub fn queued(request: api::SyncRequest, by_admin: bool, now: u64) -> SyncJob {
        SyncJob {
            id: format!("sync-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]),
            seq: 0,
            state: SyncState::Queued,
            source: request.source,
            pinned_source: None,
            dest: request.dest,
            include: request.include,
            exclude: request.exclude,
            secret: request.secret.map(String::from),
            by_admin,
            progress: SyncProgress::default(),
            attempts: 0,
            retries: 0,
            retrying: None,
            created_at: now,
            started_at: None,
            finished_at: None,
            version: None,
            error: None,
            lease: None,
            schedule: None,
        }
    }

    /// The job as the API shows it: times in RFC 3339, no `seq`.
    pub fn view(self) -> api::SyncJob {
        api::SyncJob {
            id: self.id,
            state: self.state,
            source: self.source,
            pinned_source: self.pinned_source,
            dest: self.dest,
            include: self.include,
            exclude: self.exclude,
            secret: self.secret,
            progress: self.progress,
            attempts: self.attempts,
            retries: self.retries,
            retrying: self.retrying,
            created_at: Some(rfc3339(self.created_at)),
            started_at: self.started_at.map(rfc3339),
            finished_at: self.finished_at.map(rfc3339),
            version: self.version,
            error: self.error,
            schedule: self.schedule,
        }
    }
}

/// The version of the finished-file records this release writes: the
/// `record` field of each. Release 1 wrote records without the field (and
/// with a BLAKE3 per chunk and no chaining values); a record without it,
/// or with any other version, is not a finished file: the job reads that
/// file again, and the new record replaces it.
pub const FILE_RECORD: u32 = 2;

/// A file a job has stored and verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDone {
    pub size: u64,
    pub version: Option<String>,
    pub mode: u32,
    pub blake3: B3Digest,
    pub chunks: Vec<ChunkRef>,
    /// Chaining values of the file's 1 MiB pieces (SPEC.md §2.5).
    pub pieces: Vec<PieceCv>,
}

/// Where a sealed file is found again by a later job (SPEC.md §8.5): the
/// chunking it was cut with (another volume's parameters cut other chunks,
/// and so another version digest), the source's scope and the file's
/// identity there.
#[derive(Clone, Debug)]
pub struct ReuseKey {
    pub chunking: ChunkingParams,
    pub scope: String,
    pub identity: String,
}

impl ReuseKey {
    fn key(&self) -> String {
        let c = self.chunking;
        key(&[
            &format!("{}.{}.{}", c.min, c.avg, c.max),
            &self.scope,
            &self.identity,
        ])
    }
}

/// A [`FileDone`] as stored, record version [`FILE_RECORD`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRecord {
    record: u32,
    size: u64,
    version: Option<String>,
    mode: u32,
    blake3: B3Digest,
    chunks: Vec<ChunkRef>,
    /// The chaining values, one hex string (64 digits each).
    pieces: String,
}

/// Only the marker, read first: nothing else of a record of another
/// version is interpreted.
#[derive(Deserialize)]
struct RecordVersion {
    #[serde(default)]
    record: Option<u32>,
}

impl FileDone {
    fn encode(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(&FileRecord {
            record: FILE_RECORD,
            size: self.size,
            version: self.version.clone(),
            mode: self.mode,
            blake3: self.blake3,
            chunks: self.chunks.clone(),
            pieces: self.pieces.iter().map(hex::encode).collect(),
        })
    }

    /// A stored record, when it is one of this release's and describes a
    /// whole file: its chunks cover its size and its chaining values merge
    /// to its BLAKE3. Anything else (a release 1 record, a future one, a
    /// damaged one) is `None`: not done.
    fn decode(bytes: &[u8]) -> Option<FileDone> {
        let v: RecordVersion = serde_json::from_slice(bytes).ok()?;
        if v.record != Some(FILE_RECORD) {
            return None;
        }
        let r: FileRecord = serde_json::from_slice(bytes).ok()?;
        let raw = hex::decode(&r.pieces).ok()?;
        if raw.len() % 32 != 0 {
            return None;
        }
        let pieces: Vec<PieceCv> = raw
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        let covered = r.chunks.iter().try_fold(0u64, |at, c| {
            (c.offset == at).then(|| at + u64::from(c.length))
        });
        if covered != Some(r.size) || pieces.len() as u64 != chain::piece_count(r.size) {
            return None;
        }
        if !pieces.is_empty() && chain::combine(&pieces, r.size) != Some(r.blake3) {
            return None;
        }
        Some(FileDone {
            size: r.size,
            version: r.version,
            mode: r.mode,
            blake3: r.blake3,
            chunks: r.chunks,
            pieces,
        })
    }
}

pub(in crate::store::meta) fn get_job(
    t: &impl ReadableTable<Bytes>,
    id: &str,
) -> Result<Option<SyncJob>> {
    match t.get(id)? {
        Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
        None => Ok(None),
    }
}

/// The `seq` of a job stored now: one past every stored job's.
pub(in crate::store::meta) fn next_seq(tx: &WriteTransaction) -> Result<u64> {
    let t = tx.open_table(SYNC_JOBS)?;
    let mut max = 0;
    for row in t.iter()? {
        let (_, v) = row?;
        let j: SyncJob = serde_json::from_slice(v.value())?;
        max = max.max(j.seq);
    }
    Ok(max + 1)
}

pub(in crate::store::meta) fn put_job(tx: &WriteTransaction, job: &SyncJob) -> Result<()> {
    tx.open_table(SYNC_JOBS)?
        .insert(job.id.as_str(), serde_json::to_vec(job)?.as_slice())?;
    Ok(())
}

fn drop_files(tx: &WriteTransaction, id: &str) -> Result<()> {
    let (lo, hi) = prefix(&[id]);
    let mut t = tx.open_table(SYNC_FILES)?;
    t.remove_range(&lo, &hi)?;
    Ok(())
}

impl MetaStore {
    /// Stores a new job; its `seq` is set here.
    pub fn create_sync(&self, mut job: SyncJob) -> Result<SyncJob> {
        let tx = self.db.begin_write()?;
        job.seq = next_seq(&tx)?;
        put_job(&tx, &job)?;
        tx.commit()?;
        Ok(job)
    }

    pub fn sync(&self, id: &str) -> Result<Option<SyncJob>> {
        let tx = self.db.begin_read()?;
        get_job(&tx.open_table(SYNC_JOBS)?, id)
    }

    /// Jobs, newest first, optionally only those into volume `dest`.
    pub fn syncs(&self, dest: Option<&str>) -> Result<Vec<SyncJob>> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for row in tx.open_table(SYNC_JOBS)?.iter()? {
            let (_, v) = row?;
            let j: SyncJob = serde_json::from_slice(v.value())?;
            if dest.is_none_or(|d| d == j.dest.name) {
                out.push(j);
            }
        }
        out.sort_by_key(|j| std::cmp::Reverse(j.seq));
        Ok(out)
    }

    /// Applies `f` to a job in one transaction, unless `f` answers false
    /// (nothing is written then). Answers the job as it now is.
    pub fn update_sync(
        &self,
        id: &str,
        f: impl FnOnce(&mut SyncJob) -> bool,
    ) -> Result<Option<(SyncJob, bool)>> {
        let tx = self.db.begin_write()?;
        let Some(mut job) = get_job(&tx.open_table(SYNC_JOBS)?, id)? else {
            return Ok(None);
        };
        let changed = f(&mut job);
        if changed {
            put_job(&tx, &job)?;
            if job.state.is_finished() {
                drop_files(&tx, id)?;
            }
            tx.commit()?;
        }
        Ok(Some((job, changed)))
    }

    /// Takes the oldest job a worker of `holder` may run: a queued one, or
    /// a running one whose lease lapsed (its replica stopped renewing it).
    /// It becomes `RUNNING`, leased to `holder` until `now + lease`, with
    /// one more attempt.
    pub fn next_sync(&self, now: u64, holder: &str, lease: u64) -> Result<Option<SyncJob>> {
        let tx = self.db.begin_write()?;
        let next = {
            let t = tx.open_table(SYNC_JOBS)?;
            let mut best: Option<SyncJob> = None;
            for row in t.iter()? {
                let (_, v) = row?;
                let j: SyncJob = serde_json::from_slice(v.value())?;
                let takeable = j.state == SyncState::Queued
                    || (j.state == SyncState::Running
                        && j.lease.as_ref().is_some_and(|l| l.until <= now));
                if takeable && best.as_ref().is_none_or(|b| j.seq < b.seq) {
                    best = Some(j);
                }
            }
            best
        };
        let Some(mut job) = next else {
            return Ok(None);
        };
        job.state = SyncState::Running;
        job.attempts += 1;
        job.started_at.get_or_insert(now);
        job.lease = Some(Lease {
            holder: holder.to_string(),
            until: now + lease,
        });
        put_job(&tx, &job)?;
        tx.commit()?;
        Ok(Some(job))
    }

    /// Extends `holder`'s lease on job `id` to `until`; false when the job
    /// is no longer running under that lease (canceled, finished, or taken
    /// by another replica after the lease lapsed).
    pub fn renew_sync_lease(&self, id: &str, holder: &str, until: u64) -> Result<bool> {
        let renewed = self.update_sync(id, |j| match &mut j.lease {
            Some(l) if j.state == SyncState::Running && l.holder == holder => {
                l.until = until;
                true
            }
            _ => false,
        })?;
        Ok(renewed.is_some_and(|(_, changed)| changed))
    }

    /// At startup of registry process `holder`: the jobs it was running
    /// when it stopped, and those whose lease lapsed or that have none (an
    /// earlier release's), are queued again (their finished files stay
    /// recorded). Another replica's live job is left alone.
    pub fn requeue_syncs(&self, holder: &str, now: u64) -> Result<usize> {
        let tx = self.db.begin_write()?;
        let running: Vec<SyncJob> = {
            let t = tx.open_table(SYNC_JOBS)?;
            let mut v = Vec::new();
            for row in t.iter()? {
                let (_, val) = row?;
                let j: SyncJob = serde_json::from_slice(val.value())?;
                let orphaned = match &j.lease {
                    None => true,
                    Some(l) => l.holder == holder || l.until <= now,
                };
                if j.state == SyncState::Running && orphaned {
                    v.push(j);
                }
            }
            v
        };
        for mut j in running.iter().cloned() {
            j.state = SyncState::Queued;
            j.lease = None;
            put_job(&tx, &j)?;
        }
        tx.commit()?;
        Ok(running.len())
    }

    /// Records a finished file and the job's progress together, and, under
    /// `reuse`, for later jobs.
    pub fn sync_file_done(
        &self,
        id: &str,
        path: &str,
        file: &FileDone,
        progress: &SyncProgress,
        reuse: Option<&ReuseKey>,
    ) -> Result<()> {
        let tx = self.db.begin_write()?;
        let Some(mut job) = get_job(&tx.open_table(SYNC_JOBS)?, id)? else {
            return Ok(());
        };
        if job.state != SyncState::Running {
            return Ok(());
        }
        let record = file.encode()?;
        tx.open_table(SYNC_FILES)?
            .insert(key(&[id, path]).as_str(), record.as_slice())?;
        if let Some(r) = reuse {
            tx.open_table(SYNC_REUSE)?
                .insert(r.key().as_str(), record.as_slice())?;
        }
        job.progress = *progress;
        put_job(&tx, &job)?;
        tx.commit()?;
        Ok(())
    }

    /// The records of files earlier jobs sealed under `keys`, by index in
    /// `keys`. Records of another release or damaged are left out.
    pub fn reusable_files(&self, keys: &[ReuseKey]) -> Result<HashMap<usize, FileDone>> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(SYNC_REUSE)?;
        let mut out = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            if let Some(v) = table.get(k.key().as_str())? {
                if let Some(f) = FileDone::decode(v.value()) {
                    out.insert(i, f);
                }
            }
        }
        Ok(out)
    }

    /// Forgets a record whose chunks are no longer all stored.
    pub fn forget_reusable(&self, key: &ReuseKey) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(SYNC_REUSE)?.remove(key.key().as_str())?;
        tx.commit()?;
        Ok(())
    }

    /// Forgets every record that names a blob in `gone` (garbage
    /// collection deleted them), or that no longer decodes; how many went.
    pub fn forget_reusable_naming(&self, gone: &HashSet<String>) -> Result<u64> {
        let tx = self.db.begin_write()?;
        let doomed: Vec<String> = {
            let table = tx.open_table(SYNC_REUSE)?;
            let mut doomed = Vec::new();
            for row in table.iter()? {
                let (k, v) = row?;
                let keep = FileDone::decode(v.value()).is_some_and(|f| {
                    !f.chunks
                        .iter()
                        .any(|c| gone.contains(&c.sha256.to_string()))
                });
                if !keep {
                    doomed.push(k.value().to_string());
                }
            }
            doomed
        };
        tx.open_table(SYNC_REUSE)?.remove_many(&doomed)?;
        tx.commit()?;
        Ok(doomed.len() as u64)
    }

    /// The files a job finished before, by path. Records of another
    /// version ([`FILE_RECORD`]) are left out: those files are read again.
    pub fn sync_files(&self, id: &str) -> Result<HashMap<String, FileDone>> {
        let tx = self.db.begin_read()?;
        let (lo, hi) = prefix(&[id]);
        let mut out = HashMap::new();
        let mut stale = 0u64;
        for row in tx.open_table(SYNC_FILES)?.range(lo.as_str()..hi.as_str())? {
            let (k, v) = row?;
            let path = k.value()[lo.len()..].to_string();
            match FileDone::decode(v.value()) {
                Some(f) => {
                    out.insert(path, f);
                }
                None => stale += 1,
            }
        }
        if stale > 0 {
            tracing::info!(
                job = id,
                stale,
                "finished-file records of another release or damaged; those files are read again"
            );
        }
        Ok(out)
    }

    pub fn set_secret(&self, name: &str, secret: &StoredSecret) -> Result<()> {
        let json = serde_json::to_vec(secret)?;
        let tx = self.db.begin_write()?;
        tx.open_table(SECRETS)?.insert(name, json.as_slice())?;
        tx.commit()?;
        Ok(())
    }

    pub fn secret(&self, name: &str) -> Result<Option<StoredSecret>> {
        let tx = self.db.begin_read()?;
        let row = tx.open_table(SECRETS)?.get(name)?;
        Ok(match row {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    pub fn secrets(&self) -> Result<Vec<api::SecretInfo>> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for row in tx.open_table(SECRETS)?.iter()? {
            let (k, v) = row?;
            let s: StoredSecret = serde_json::from_slice(v.value())?;
            out.push(s.info(k.value()));
        }
        Ok(out)
    }

    pub fn delete_secret(&self, name: &str) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let removed = tx.open_table(SECRETS)?.remove(name)?.is_some();
        tx.commit()?;
        Ok(removed)
    }

    /// Seals the secrets an earlier release stored in plaintext, bound to
    /// no source (so admins only may use them until rebound), and drops
    /// their table; how many there were. The pages that held them are
    /// free but not overwritten: the caller rewrites the database file.
    pub fn seal_plaintext_secrets(&self, key: &SecretKey) -> Result<usize> {
        use redb::ReadableTable as _;
        let tx = self.db.begin_write()?;
        // Only a redb database can be that old.
        let Some(redb_tx) = tx.as_redb() else {
            return Ok(0);
        };
        let old: Vec<(String, Vec<u8>)> = match redb_tx.open_table(PLAINTEXT_SECRETS) {
            Ok(t) => t
                .iter()?
                .map(|r| r.map(|(k, v)| (k.value().to_string(), v.value().to_vec())))
                .collect::<std::result::Result<_, _>>()?,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        {
            let mut sealed = tx.open_table(SECRETS)?;
            for (name, value) in &old {
                let s = StoredSecret::seal(key, name, value, Vec::new(), Vec::new());
                sealed.insert(name.as_str(), serde_json::to_vec(&s)?.as_slice())?;
            }
        }
        redb_tx.delete_table(PLAINTEXT_SECRETS)?;
        tx.commit()?;
        Ok(old.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::tree::EntryData;
    use serde_json::{json, Value};

    fn done(data: &[u8]) -> FileDone {
        let EntryData::File {
            size,
            blake3,
            chunks,
            pieces,
        } = EntryData::file_of(data, &[data.len() / 2, data.len() - data.len() / 2])
        else {
            unreachable!()
        };
        FileDone {
            size,
            version: Some("etag-1".into()),
            mode: 0o644,
            blake3,
            chunks,
            pieces,
        }
    }

    /// A job as the registry has stored it since sync jobs exist: the
    /// API's types inside it must keep reading it, and write it back as
    /// it was.
    #[test]
    fn stored_jobs_still_read() {
        let stored = json!({
            "id": "sync-0123456789abcdef", "seq": 4, "state": "READY",
            "source": "hf://Qwen/Qwen3-8B", "pinned_source": null,
            "dest": {"name": "weights/qwen3-8b", "tag": "prod"},
            "include": ["*.json"], "exclude": [], "secret": "hf-token",
            "progress": {"files_done": 7, "files_total": 7, "bytes_done": 70,
                         "bytes_total": 70, "bytes_stored": 60},
            "attempts": 1, "retries": 2, "retrying": null,
            "created_at": 1_796_169_600u64, "started_at": 1_796_169_601u64,
            "finished_at": 1_796_169_613u64,
            "version": {"digest": format!("b3:{}", "ab".repeat(32)),
                        "index_digest": format!("sha256:{}", "cd".repeat(32))},
            "error": {"code": "SOURCE_DENIED", "message": "no"}
        });
        let job: SyncJob = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(job.state, SyncState::Ready);
        // Written back as it was, with the counters added since at zero.
        let mut written = stored.clone();
        written["progress"]["files_reused"] = json!(0);
        written["progress"]["bytes_reused"] = json!(0);
        assert_eq!(serde_json::to_value(&job).unwrap(), written);
        let view = serde_json::to_value(job.view()).unwrap();
        assert_eq!(view["created_at"], "2026-12-02T00:00:00Z");
        assert_eq!(view["finished_at"], "2026-12-02T00:00:13Z");
        assert_eq!(view.get("seq"), None);
        assert_eq!(view["version"], stored["version"]);
    }

    #[test]
    fn plaintext_secrets_are_sealed_and_leave_no_trace_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let value = b"hf_plaintextSECRETvalue0123456789";
        {
            // As an earlier release stored it, among other data.
            let m = MetaStore::open(&path).unwrap();
            let tx = m.db.begin_write().unwrap();
            tx.as_redb()
                .unwrap()
                .open_table(PLAINTEXT_SECRETS)
                .unwrap()
                .insert("hf", value.as_slice())
                .unwrap();
            tx.open_table(crate::store::meta::schema::TAGS)
                .unwrap()
                .insert("w/x\0prod", "sha256:ab")
                .unwrap();
            tx.commit().unwrap();
            // Later data, so the secret's page sits amid others.
            for i in 0..50 {
                let tx = m.db.begin_write().unwrap();
                let mut t = tx.open_table(crate::store::meta::schema::TAGS).unwrap();
                for j in 0..100 {
                    t.insert(format!("r{i}\0t{j}").as_str(), "sha256:cd")
                        .unwrap();
                }
                drop(t);
                tx.commit().unwrap();
            }
        }
        let found = |p: &std::path::Path| {
            let bytes = std::fs::read(p).unwrap();
            bytes.windows(value.len()).any(|w| w == value)
        };
        assert!(found(&path), "the test must start from a plaintext secret");
        let key = SecretKey::load_or_create(&dir.path().join("secrets.key")).unwrap();
        let m = MetaStore::open_sealing_secrets(&path, &key).unwrap();
        assert!(!found(&path), "meta.redb still holds the plaintext");
        let s = m.secret("hf").unwrap().unwrap();
        assert_eq!(s.value(&key, "hf").unwrap(), value);
        assert!(s.for_sources.is_empty(), "sealed secrets start unbound");
        let tx = m.db.begin_read().unwrap();
        let tags = tx.open_table(crate::store::meta::schema::TAGS).unwrap();
        assert_eq!(tags.get("w/x\0prod").unwrap().unwrap().value(), "sha256:ab");
        drop(tags);
        drop(tx);
        drop(m);
        // Opening again finds nothing left to seal.
        let m = MetaStore::open_sealing_secrets(&path, &key).unwrap();
        assert_eq!(m.secrets().unwrap().len(), 1);
    }

    #[test]
    fn reuse_records_are_found_by_key_and_forgotten_with_their_chunks() {
        let (_dir, m) = MetaStore::temporary();
        let job = m
            .create_sync(SyncJob {
                id: "sync-0000000000000001".into(),
                seq: 0,
                state: SyncState::Running,
                source: "s3://b/p".into(),
                pinned_source: None,
                dest: SyncDest {
                    name: "n/v".into(),
                    tag: None,
                },
                include: vec![],
                exclude: vec![],
                secret: None,
                by_admin: false,
                progress: SyncProgress::default(),
                attempts: 1,
                retries: 0,
                retrying: None,
                created_at: 0,
                started_at: None,
                finished_at: None,
                version: None,
                error: None,
                lease: None,
                schedule: None,
            })
            .unwrap();
        let reuse = |identity: &str| ReuseKey {
            chunking: ChunkingParams::default(),
            scope: "s3://b@aws".into(),
            identity: identity.into(),
        };
        let (a, b) = (done(b"first file's bytes"), done(b"the second file"));
        for (path, f) in [("a", &a), ("b", &b)] {
            m.sync_file_done(
                &job.id,
                path,
                f,
                &SyncProgress::default(),
                Some(&reuse(path)),
            )
            .unwrap();
        }
        let other_chunking = ReuseKey {
            chunking: ChunkingParams {
                min: 1024,
                avg: 4096,
                max: 16384,
            },
            ..reuse("a")
        };
        let found = m
            .reusable_files(&[reuse("a"), reuse("b"), reuse("c"), other_chunking])
            .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!((&found[&0], &found[&1]), (&a, &b));
        // A sweep deleted one of b's chunks: only b's record goes.
        let gone: HashSet<String> = [b.chunks[0].sha256.to_string()].into();
        assert_eq!(m.forget_reusable_naming(&gone).unwrap(), 1);
        let found = m.reusable_files(&[reuse("a"), reuse("b")]).unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), [&0]);
        m.forget_reusable(&reuse("a")).unwrap();
        assert!(m.reusable_files(&[reuse("a")]).unwrap().is_empty());
    }

    #[test]
    fn records_of_another_version_are_not_done() {
        let (_dir, m) = MetaStore::temporary();
        let big: Vec<u8> = (0..(chain::PIECE as usize * 2 + 9))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let new = done(&big);
        assert_eq!(new.pieces.len(), 3);
        assert_eq!(FileDone::decode(&new.encode().unwrap()), Some(new.clone()));
        let small = done(b"a small file");
        assert_eq!(
            FileDone::decode(&small.encode().unwrap()),
            Some(small.clone())
        );

        // What release 1 wrote: no marker, a BLAKE3 per chunk, no pieces.
        let c = &small.chunks[0];
        let release1 = json!({
            "size": small.size,
            "version": "etag-1",
            "mode": 420,
            "blake3": small.blake3.to_string(),
            "chunks": [{
                "offset": c.offset,
                "length": c.length,
                "sha256": c.sha256.to_string(),
                "blake3": small.blake3.to_string(),
            }],
        });
        let mut future: Value = serde_json::from_slice(&new.encode().unwrap()).unwrap();
        future["record"] = json!(FILE_RECORD + 1);
        let mut damaged: Value = serde_json::from_slice(&new.encode().unwrap()).unwrap();
        let mut hex = damaged["pieces"].as_str().unwrap().to_string();
        hex.replace_range(0..1, if hex.starts_with('0') { "1" } else { "0" });
        damaged["pieces"] = json!(hex);
        let mut short: Value = serde_json::from_slice(&new.encode().unwrap()).unwrap();
        short["pieces"] = json!("");
        for bad in [&release1, &future, &damaged, &short] {
            assert_eq!(FileDone::decode(bad.to_string().as_bytes()), None, "{bad}");
        }

        let tx = m.db.begin_write().unwrap();
        {
            let mut t = tx.open_table(SYNC_FILES).unwrap();
            for (path, v) in [
                ("old", release1.to_string().into_bytes()),
                ("future", future.to_string().into_bytes()),
                ("big", new.encode().unwrap()),
                ("small", small.encode().unwrap()),
            ] {
                t.insert(key(&["job", path]).as_str(), v.as_slice())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
        let files = m.sync_files("job").unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files["big"], new);
        assert_eq!(files["small"], small);
    }
}
