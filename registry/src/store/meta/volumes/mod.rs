//! Volumes over the OCI view (SPEC.md §7.1): every repository that has
//! held a version keeps its versions, alive or tombstoned, a sequence
//! number, tag and volume expiries, and `head`. The rows live in the same
//! redb database as manifests and tags and change in the same
//! transactions, so the volume view and the OCI view are one truth: a
//! version index stored by any client is a sealed version (or, for a
//! version already alive, a re-publication of it: `seal`), and an OCI
//! `DELETE` of it is a tombstone.
//!
//! A tombstoned version's index rows move from the manifest table to
//! `HIDDEN`, out of the OCI view but still marked by garbage collection,
//! and move back on restore.

pub mod error;
pub mod records;
pub mod stats;

use std::collections::{BTreeMap, HashMap};

use crate::store::meta::engine::{ReadTransaction, WriteTransaction};
use sealvol_spec::{api, B3Digest, Sha256Digest, TreeFormat};

use crate::clock::rfc3339;
use crate::store::meta::db::MetaStore;
use crate::store::meta::error::MetaError;
use crate::store::meta::schema::{
    key, prefix, HIDDEN, MANIFESTS, REPOS, TAGS, TAG_EXPIRY, VERSIONS, VERSION_OF_INDEX, VOLUMES,
};
use records::{put_volume_record, version_row, volume_record_rw, volume_row};

pub use error::VolumeError;
pub use records::{Lifecycle, VersionRecord, VolumeRecord};

/// What a stored index says about its version.
#[derive(Clone, Debug)]
pub struct Sealed {
    /// `b3:<hex>`.
    pub version: String,
    pub size: Option<u64>,
    pub files: Option<u64>,
    /// The format of the tree index its tree manifest holds, by the tree
    /// blob's media type; `None` when the registry cannot tell.
    pub tree: Option<TreeFormat>,
    /// Its distinct chunks and their sizes, from its chunk manifests;
    /// `None` when the registry could not read them.
    pub chunks: Option<crate::store::meta::volumes::stats::ChunkSizes>,
}

impl Sealed {
    /// What a parsed version index says, its tree being of format `tree`.
    pub fn new(
        ix: &sealvol_spec::oci::VersionIndex,
        tree: Option<TreeFormat>,
        chunks: Option<crate::store::meta::volumes::stats::ChunkSizes>,
    ) -> Sealed {
        Sealed {
            version: ix.digest.to_string(),
            size: ix.size,
            files: ix.files,
            tree,
            chunks,
        }
    }
}

type Result<T, E = VolumeError> = std::result::Result<T, E>;

fn digest_tag(version: &str) -> String {
    format!("b3-{}", version.trim_start_matches("b3:"))
}

/// `head` and `b3-<hex>` belong to the registry.
pub fn is_reserved(tag: &str) -> bool {
    tag == sealvol_spec::reference::HEAD || tag.starts_with("b3-")
}

fn put_version(tx: &WriteTransaction, repo: &str, version: &str, r: &VersionRecord) -> Result<()> {
    let bytes = serde_json::to_vec(r)?;
    tx.open_table(VERSIONS)?
        .insert(key(&[repo, version]).as_str(), bytes.as_slice())?;
    Ok(())
}

/// Counts a change of `repo` if it is a volume.
fn bump(tx: &WriteTransaction, repo: &str, now: u64) -> Result<(), MetaError> {
    let mut t = tx.open_table(VOLUMES)?;
    if let Some(mut v) = volume_row(&t, repo)? {
        v.sequence += 1;
        v.updated_at = now;
        t.insert(repo, serde_json::to_vec(&v)?.as_slice())?;
    }
    Ok(())
}

pub(crate) fn version_of_index(
    tx: &WriteTransaction,
    repo: &str,
    index: &str,
) -> Result<Option<String>, MetaError> {
    Ok(tx
        .open_table(VERSION_OF_INDEX)?
        .get(key(&[repo, index]).as_str())?
        .map(|v| v.value().to_string()))
}

/// Points `tag` at `digest` with an optional expiry; counts a change when
/// the target or expiry moved.
pub(crate) fn put_tag(
    tx: &WriteTransaction,
    repo: &str,
    tag: &str,
    digest: &str,
    expires_at: Option<u64>,
    now: u64,
) -> Result<(), MetaError> {
    let k = key(&[repo, tag]);
    let old = tx
        .open_table(TAGS)?
        .insert(k.as_str(), digest)?
        .map(|v| v.value().to_string());
    let mut exp = tx.open_table(TAG_EXPIRY)?;
    let old_exp = match expires_at {
        Some(e) => exp.insert(k.as_str(), e)?,
        None => exp.remove(k.as_str())?,
    }
    .map(|v| v.value());
    drop(exp);
    if old.as_deref() != Some(digest) || old_exp != expires_at {
        bump(tx, repo, now)?;
    }
    Ok(())
}

pub(crate) fn remove_tag(
    tx: &WriteTransaction,
    repo: &str,
    tag: &str,
    now: u64,
) -> Result<bool, MetaError> {
    let k = key(&[repo, tag]);
    let removed = tx.open_table(TAGS)?.remove(k.as_str())?.is_some();
    tx.open_table(TAG_EXPIRY)?.remove(k.as_str())?;
    if removed {
        bump(tx, repo, now)?;
    }
    Ok(removed)
}

/// Removes every tag of `repo` that points at one of `digests`; returns
/// the names.
pub(crate) fn drop_tags_of(
    tx: &WriteTransaction,
    repo: &str,
    digests: &[String],
    now: u64,
) -> Result<Vec<String>, MetaError> {
    let (lo, hi) = prefix(&[repo]);
    let stale: Vec<String> = {
        let tags = tx.open_table(TAGS)?;
        let rows = tags.range(lo.as_str()..hi.as_str())?;
        let mut out = Vec::new();
        for row in rows {
            let (k, v) = row?;
            if digests.iter().any(|d| d == v.value()) {
                out.push(k.value()[repo.len() + 1..].to_string());
            }
        }
        out
    };
    for t in &stale {
        remove_tag(tx, repo, t, now)?;
    }
    Ok(stale)
}

/// Records a stored version index `index` (SPEC.md §7.1) and answers the
/// index the version's tags now name: its current index.
///
/// - A version the volume does not hold, or holds tombstoned, is sealed
///   now: alive, the volume's next sequence number, `head` and
///   `b3-<hex>` on its current index; a tombstoned version's indexes come
///   back with it.
/// - A version that is alive is re-published: the index joins its
///   indexes and becomes its current index, and every tag on one of its
///   indexes (`b3-<hex>`, user tags, `head` when `head` is this version)
///   moves to it. Nothing else changes: no sequence number moves, `head`
///   does not come to it, `created_at` stays. Storing the current index
///   again changes nothing.
/// - Never a downgrade: an index whose tree is not known to be format 2
///   (format 1, or unknown) does not replace a current index whose tree
///   is format 2. It is kept among the indexes and the tags stay on (or
///   move to) the format 2 one, in both cases above. (`manifests` refuses
///   an index whose tree it cannot read before it gets here.)
pub(crate) fn seal(
    tx: &WriteTransaction,
    repo: &str,
    index: &str,
    sealed: &Sealed,
    now: u64,
) -> Result<String, MetaError> {
    let existing = version_row(&tx.open_table(VERSIONS)?, repo, &sealed.version)?;
    let alive = existing
        .as_ref()
        .is_some_and(|r| r.lifecycle == Lifecycle::Alive);
    if let Some(r) = existing.as_ref().filter(|_| alive) {
        if r.index_digest == index {
            return Ok(r.index_digest.clone());
        }
    }
    let mut rec = existing.unwrap_or(VersionRecord {
        index_digest: index.to_string(),
        indexes: Vec::new(),
        verifiable: Vec::new(),
        sequence: 0,
        size: sealed.size,
        files: sealed.files,
        created_at: now,
        lifecycle: Lifecycle::Alive,
        tombstoned_at: None,
    });
    if rec.lifecycle == Lifecycle::Tombstoned {
        unhide(tx, repo, &rec.indexes)?;
    }
    let downgrade = sealed.tree != Some(TreeFormat::V2)
        && rec.index_digest != index
        && rec.verifiable.contains(&rec.index_digest);
    if !rec.indexes.iter().any(|i| i == index) {
        rec.indexes.push(index.to_string());
    }
    if sealed.tree == Some(TreeFormat::V2) && !rec.verifiable.iter().any(|i| i == index) {
        rec.verifiable.push(index.to_string());
    }
    if !downgrade {
        rec.index_digest = index.to_string();
    }
    tx.open_table(VERSION_OF_INDEX)?
        .insert(key(&[repo, index]).as_str(), sealed.version.as_str())?;
    let current = rec.index_digest.clone();
    if alive {
        put_version(tx, repo, &sealed.version, &rec).map_err(meta)?;
        retag(tx, repo, &rec.indexes, &current)?;
        tx.open_table(TAGS)?.insert(
            key(&[repo, &digest_tag(&sealed.version)]).as_str(),
            current.as_str(),
        )?;
        return Ok(current);
    }
    let mut vol = volume_row(&tx.open_table(VOLUMES)?, repo)?.unwrap_or_else(VolumeRecord::first);
    vol.sequence += 1;
    vol.updated_at = now;
    crate::store::meta::volumes::stats::add_sealed(tx, repo, &mut vol, sealed.chunks.as_ref())?;
    rec.sequence = vol.sequence;
    rec.lifecycle = Lifecycle::Alive;
    rec.tombstoned_at = None;
    put_version(tx, repo, &sealed.version, &rec).map_err(meta)?;
    tx.open_table(VOLUMES)?
        .insert(repo, serde_json::to_vec(&vol)?.as_slice())?;
    let mut tags = tx.open_table(TAGS)?;
    tags.insert(
        key(&[repo, sealvol_spec::reference::HEAD]).as_str(),
        current.as_str(),
    )?;
    tags.insert(
        key(&[repo, &digest_tag(&sealed.version)]).as_str(),
        current.as_str(),
    )?;
    Ok(current)
}

/// Points every tag of `repo` on one of `indexes` at `current`, counting
/// no change: they name the same version.
fn retag(
    tx: &WriteTransaction,
    repo: &str,
    indexes: &[String],
    current: &str,
) -> Result<(), MetaError> {
    let (lo, hi) = prefix(&[repo]);
    let mut tags = tx.open_table(TAGS)?;
    let moved: Vec<String> = {
        let mut out = Vec::new();
        for row in tags.range(lo.as_str()..hi.as_str())? {
            let (k, v) = row?;
            if v.value() != current && indexes.iter().any(|i| i == v.value()) {
                out.push(k.value().to_string());
            }
        }
        out
    };
    for k in &moved {
        tags.insert(k.as_str(), current)?;
    }
    Ok(())
}

fn meta(e: VolumeError) -> MetaError {
    match e {
        VolumeError::Meta(m) => m,
        other => MetaError(other.to_string()),
    }
}

/// Moves manifest rows between the OCI view and the hidden table.
fn move_rows(
    tx: &WriteTransaction,
    repo: &str,
    digests: &[String],
    hide: bool,
) -> Result<(), MetaError> {
    let (mut from, mut to) = if hide {
        (tx.open_table(MANIFESTS)?, tx.open_table(HIDDEN)?)
    } else {
        (tx.open_table(HIDDEN)?, tx.open_table(MANIFESTS)?)
    };
    for d in digests {
        let k = key(&[repo, d]);
        let row = from.remove(k.as_str())?.map(|v| v.value().to_vec());
        if let Some(bytes) = row {
            to.insert(k.as_str(), bytes.as_slice())?;
        }
    }
    Ok(())
}

fn unhide(tx: &WriteTransaction, repo: &str, digests: &[String]) -> Result<(), MetaError> {
    move_rows(tx, repo, digests, false)
}

/// The alive version with the highest sequence, if any.
fn newest_alive(tx: &WriteTransaction, repo: &str) -> Result<Option<VersionRecord>, MetaError> {
    let t = tx.open_table(VERSIONS)?;
    let (lo, hi) = prefix(&[repo]);
    let mut best: Option<VersionRecord> = None;
    for row in t.range(lo.as_str()..hi.as_str())? {
        let (_, v) = row?;
        let r: VersionRecord = serde_json::from_slice(v.value())?;
        if r.lifecycle == Lifecycle::Alive && best.as_ref().is_none_or(|b| r.sequence > b.sequence)
        {
            best = Some(r);
        }
    }
    Ok(best)
}

/// Deletes a version: hides its indexes, removes the tags on them, and
/// moves `head` to the newest alive version when it pointed here.
pub(crate) fn tombstone(
    tx: &WriteTransaction,
    repo: &str,
    version: &str,
    now: u64,
) -> Result<VersionRecord> {
    let mut rec = version_row(&tx.open_table(VERSIONS)?, repo, version)?
        .filter(|r| r.lifecycle == Lifecycle::Alive)
        .ok_or_else(|| {
            VolumeError::VersionUnknown(format!("{repo} has no alive version {version}"))
        })?;
    move_rows(tx, repo, &rec.indexes, true)?;
    let dropped = drop_tags_of(tx, repo, &rec.indexes, now)?;
    rec.lifecycle = Lifecycle::Tombstoned;
    rec.tombstoned_at = Some(now);
    put_version(tx, repo, version, &rec)?;
    if dropped.iter().any(|t| t == sealvol_spec::reference::HEAD) {
        if let Some(next) = newest_alive(tx, repo)? {
            tx.open_table(TAGS)?.insert(
                key(&[repo, sealvol_spec::reference::HEAD]).as_str(),
                next.index_digest.as_str(),
            )?;
        }
    }
    bump(tx, repo, now)?;
    Ok(rec)
}

/// Brings a tombstoned version back within `retention` seconds of its
/// delete: its indexes, its `b3-` tag, and `head` if it is the newest.
pub(crate) fn restore(
    tx: &WriteTransaction,
    repo: &str,
    version: &str,
    now: u64,
    retention: u64,
) -> Result<VersionRecord> {
    let mut rec = version_row(&tx.open_table(VERSIONS)?, repo, version)?.ok_or_else(|| {
        VolumeError::VersionUnknown(format!(
            "{repo} has no version {version} (deleted versions can be restored for {} days)",
            retention / 86_400
        ))
    })?;
    if rec.lifecycle == Lifecycle::Alive {
        return Err(VolumeError::NotDeleted(format!("{repo}@{version}")));
    }
    if rec
        .tombstoned_at
        .is_some_and(|t| t.saturating_add(retention) <= now)
    {
        return Err(VolumeError::RetentionExpired {
            what: format!("{repo}@{version}"),
            days: retention / 86_400,
        });
    }
    unhide(tx, repo, &rec.indexes)?;
    let head_seq = {
        let tags = tx.open_table(TAGS)?;
        let head = tags
            .get(key(&[repo, sealvol_spec::reference::HEAD]).as_str())?
            .map(|v| v.value().to_string());
        match head {
            Some(h) => match version_of_index(tx, repo, &h)? {
                Some(v) => version_row(&tx.open_table(VERSIONS)?, repo, &v)?.map(|r| r.sequence),
                None => Some(u64::MAX), // head names a non-version: leave it
            },
            None => None,
        }
    };
    let mut tags = tx.open_table(TAGS)?;
    tags.insert(
        key(&[repo, &digest_tag(version)]).as_str(),
        rec.index_digest.as_str(),
    )?;
    if head_seq.is_none_or(|s| s < rec.sequence) {
        tags.insert(
            key(&[repo, sealvol_spec::reference::HEAD]).as_str(),
            rec.index_digest.as_str(),
        )?;
    }
    drop(tags);
    rec.lifecycle = Lifecycle::Alive;
    rec.tombstoned_at = None;
    put_version(tx, repo, version, &rec)?;
    bump(tx, repo, now)?;
    Ok(rec)
}

/// Forgets a version deleted more than `retention` ago; returns its
/// indexes, whose rows are gone too.
pub(crate) fn purge(
    tx: &WriteTransaction,
    repo: &str,
    version: &str,
    now: u64,
    retention: u64,
) -> Result<Option<Vec<String>>, MetaError> {
    let Some(rec) = version_row(&tx.open_table(VERSIONS)?, repo, version)? else {
        return Ok(None);
    };
    let expired = rec.lifecycle == Lifecycle::Tombstoned
        && rec
            .tombstoned_at
            .is_some_and(|t| t.saturating_add(retention) <= now);
    if !expired {
        return Ok(None);
    }
    let mut hidden = tx.open_table(HIDDEN)?;
    let mut of_index = tx.open_table(VERSION_OF_INDEX)?;
    for d in &rec.indexes {
        hidden.remove(key(&[repo, d]).as_str())?;
        of_index.remove(key(&[repo, d]).as_str())?;
    }
    tx.open_table(VERSIONS)?
        .remove(key(&[repo, version]).as_str())?;
    if let Some(mut vol) = volume_record_rw(tx, repo)? {
        crate::store::meta::volumes::stats::purged(&mut vol);
        put_volume_record(tx, repo, &vol)?;
    }
    Ok(Some(rec.indexes))
}

// ---- what the API shows ------------------------------------------------------

/// Everything about one volume, read in one transaction.
struct Snapshot {
    volume: VolumeRecord,
    versions: Vec<(String, VersionRecord)>,
    /// Tag -> (index digest, expiry).
    tags: BTreeMap<String, (String, Option<u64>)>,
    version_of: HashMap<String, String>,
}

fn namespace_of(repo: &str) -> String {
    repo.rsplit_once('/').map_or("", |(ns, _)| ns).to_string()
}

impl Snapshot {
    fn read(tx: &ReadTransaction, repo: &str) -> Result<Option<Snapshot>, MetaError> {
        let Some(volume) = volume_row(&tx.open_table(VOLUMES)?, repo)? else {
            return Ok(None);
        };
        let (lo, hi) = prefix(&[repo]);
        let strip = repo.len() + 1;
        let mut versions = Vec::new();
        let mut version_of = HashMap::new();
        for row in tx.open_table(VERSIONS)?.range(lo.as_str()..hi.as_str())? {
            let (k, v) = row?;
            let r: VersionRecord = serde_json::from_slice(v.value())?;
            let name = k.value()[strip..].to_string();
            for i in &r.indexes {
                version_of.insert(i.clone(), name.clone());
            }
            versions.push((name, r));
        }
        versions.sort_by_key(|v| std::cmp::Reverse(v.1.sequence));
        let expiry = tx.open_table(TAG_EXPIRY)?;
        let mut tags = BTreeMap::new();
        for row in tx.open_table(TAGS)?.range(lo.as_str()..hi.as_str())? {
            let (k, v) = row?;
            let exp = expiry.get(k.value())?.map(|e| e.value());
            tags.insert(k.value()[strip..].to_string(), (v.value().to_string(), exp));
        }
        Ok(Some(Snapshot {
            volume,
            versions,
            tags,
            version_of,
        }))
    }

    fn head(&self) -> Option<&String> {
        self.tags.get(sealvol_spec::reference::HEAD).map(|(d, _)| d)
    }

    fn user_tags_of(&self, r: &VersionRecord) -> Vec<String> {
        self.tags
            .iter()
            .filter(|(t, (d, _))| !is_reserved(t) && r.indexes.contains(d))
            .map(|(t, _)| t.clone())
            .collect()
    }

    fn version_view(
        &self,
        name: &str,
        r: &VersionRecord,
        retention: u64,
    ) -> Result<api::Version, MetaError> {
        Ok(api::Version {
            digest: b3(name)?,
            index_digest: sha256(&r.index_digest)?,
            sequence: r.sequence,
            lifecycle: r.lifecycle,
            is_head: r.lifecycle == Lifecycle::Alive
                && self.head().is_some_and(|h| r.indexes.contains(h)),
            tags: self.user_tags_of(r),
            size: r.size,
            files: r.files,
            created_at: Some(rfc3339(r.created_at)),
            tombstoned_at: r.tombstoned_at.map(rfc3339),
            restorable_until: r
                .tombstoned_at
                .map(|t| rfc3339(t.saturating_add(retention))),
        })
    }

    /// The version whose index a tag names, as `head` and tags show it;
    /// `None` for a manifest that is not a version's index (SPEC.md §7.3).
    fn named_version(&self, index: &str) -> Result<Option<api::Head>, MetaError> {
        let Some(version) = self.version_of.get(index) else {
            return Ok(None);
        };
        Ok(Some(api::Head {
            digest: b3(version)?,
            index_digest: sha256(index)?,
        }))
    }

    fn volume_view(&self, repo: &str) -> Result<api::Volume, MetaError> {
        let alive: Vec<&VersionRecord> = self
            .versions
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r.lifecycle == Lifecycle::Alive)
            .collect();
        let head = match self.head() {
            Some(h) => self.named_version(h)?,
            None => None,
        };
        // User tags on versions; one on a manifest that is not a version
        // is the OCI view's only.
        let mut tags = Vec::new();
        for (t, (d, exp)) in self.tags.iter().filter(|(t, _)| !is_reserved(t)) {
            if let Some(v) = self.named_version(d)? {
                tags.push(api::TagInfo {
                    tag: t.clone(),
                    digest: v.digest,
                    index_digest: v.index_digest,
                    expires_at: exp.map(rfc3339),
                });
            }
        }
        let untagged = alive
            .iter()
            .filter(|r| {
                self.user_tags_of(r).is_empty()
                    && !self.head().is_some_and(|h| r.indexes.contains(h))
            })
            .count() as u64;
        Ok(api::Volume {
            name: repo.to_string(),
            namespace: namespace_of(repo),
            head,
            tags,
            alive: alive.len() as u64,
            tombstoned: (self.versions.len() - alive.len()) as u64,
            untagged,
            sequence: self.volume.sequence,
            updated_at: Some(rfc3339(self.volume.updated_at)),
            expires_at: self.volume.expires_at.map(rfc3339),
        })
    }
}

/// A stored `b3:` digest, typed for the API; a record that holds anything
/// else is damaged.
fn b3(s: &str) -> Result<B3Digest, MetaError> {
    s.parse()
        .map_err(|e| MetaError(format!("stored version record: {e}")))
}

fn sha256(s: &str) -> Result<Sha256Digest, MetaError> {
    s.parse()
        .map_err(|e| MetaError(format!("stored version record: {e}")))
}

/// A version named by `b3:<hex>` or by one of its indexes' `sha256:<hex>`.
fn version_name(
    tx: &impl ReadableTableSource,
    repo: &str,
    digest: &str,
) -> Result<Option<String>, MetaError> {
    if digest.starts_with("b3:") {
        return Ok(Some(digest.to_string()));
    }
    tx.version_of(repo, digest)
}

/// Lets [`version_name`] look up indexes in read and write transactions.
trait ReadableTableSource {
    fn version_of(&self, repo: &str, index: &str) -> Result<Option<String>, MetaError>;
}

impl ReadableTableSource for ReadTransaction {
    fn version_of(&self, repo: &str, index: &str) -> Result<Option<String>, MetaError> {
        Ok(self
            .open_table(VERSION_OF_INDEX)?
            .get(key(&[repo, index]).as_str())?
            .map(|v| v.value().to_string()))
    }
}

impl ReadableTableSource for WriteTransaction {
    fn version_of(&self, repo: &str, index: &str) -> Result<Option<String>, MetaError> {
        version_of_index(self, repo, index)
    }
}

fn unknown_volume(repo: &str) -> VolumeError {
    VolumeError::VolumeUnknown(repo.to_string())
}

fn unknown_version(repo: &str, digest: &str) -> VolumeError {
    VolumeError::VersionUnknown(format!("{repo} has no version {digest}"))
}

impl MetaStore {
    pub fn volume(&self, repo: &str) -> Result<api::Volume> {
        let tx = self.db.begin_read()?;
        let snap = Snapshot::read(&tx, repo)?.ok_or_else(|| unknown_volume(repo))?;
        Ok(snap.volume_view(repo)?)
    }

    /// Every volume, or those of one namespace, by name.
    pub fn volumes(&self, namespace: Option<&str>) -> Result<Vec<api::Volume>> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for row in tx.open_table(VOLUMES)?.range::<&str>(..)? {
            let (k, _) = row?;
            let repo = k.value().to_string();
            if namespace.is_some_and(|ns| namespace_of(&repo) != ns) {
                continue;
            }
            if let Some(s) = Snapshot::read(&tx, &repo)? {
                out.push(s.volume_view(&repo)?);
            }
        }
        Ok(out)
    }

    /// The namespaces holding a volume that `visible` accepts.
    pub fn namespaces(&self, visible: impl Fn(&str) -> bool) -> Result<Vec<String>> {
        let tx = self.db.begin_read()?;
        let mut out: Vec<String> = Vec::new();
        for row in tx.open_table(VOLUMES)?.range::<&str>(..)? {
            let row = row?;
            if !visible(row.0.value()) {
                continue;
            }
            let ns = namespace_of(row.0.value());
            if out.last() != Some(&ns) {
                out.push(ns);
            }
        }
        out.dedup();
        Ok(out)
    }

    /// Versions newest first (highest sequence).
    pub fn versions(
        &self,
        repo: &str,
        include_tombstoned: bool,
        retention: u64,
    ) -> Result<Vec<api::Version>> {
        let tx = self.db.begin_read()?;
        let snap = Snapshot::read(&tx, repo)?.ok_or_else(|| unknown_volume(repo))?;
        Ok(snap
            .versions
            .iter()
            .filter(|(_, r)| include_tombstoned || r.lifecycle == Lifecycle::Alive)
            .map(|(n, r)| snap.version_view(n, r, retention))
            .collect::<Result<_, _>>()?)
    }

    pub fn version(&self, repo: &str, digest: &str, retention: u64) -> Result<api::Version> {
        let tx = self.db.begin_read()?;
        let snap = Snapshot::read(&tx, repo)?.ok_or_else(|| unknown_volume(repo))?;
        let name = version_name(&tx, repo, digest)?.ok_or_else(|| unknown_version(repo, digest))?;
        let (n, r) = snap
            .versions
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| unknown_version(repo, digest))?;
        Ok(snap.version_view(n, r, retention)?)
    }

    /// Runs `f` in a write transaction on an existing volume and commits,
    /// then reads the version `digest` back.
    fn change_version(
        &self,
        repo: &str,
        digest: &str,
        retention: u64,
        f: impl FnOnce(&WriteTransaction, &str) -> Result<VersionRecord>,
    ) -> Result<api::Version> {
        let tx = self.db.begin_write()?;
        if volume_row(&tx.open_table(VOLUMES)?, repo)?.is_none() {
            return Err(unknown_volume(repo));
        }
        let name = version_name(&tx, repo, digest)?.ok_or_else(|| unknown_version(repo, digest))?;
        f(&tx, &name)?;
        tx.commit()?;
        self.version(repo, &name, retention)
    }

    pub fn delete_version(
        &self,
        repo: &str,
        digest: &str,
        now: u64,
        retention: u64,
    ) -> Result<api::Version> {
        self.change_version(repo, digest, retention, |tx, name| {
            tombstone(tx, repo, name, now)
        })
    }

    pub fn restore_version(
        &self,
        repo: &str,
        digest: &str,
        now: u64,
        retention: u64,
    ) -> Result<api::Version> {
        self.change_version(repo, digest, retention, |tx, name| {
            restore(tx, repo, name, now, retention)
        })
    }

    /// Deletes every alive version of a volume; returns them.
    pub fn delete_volume(&self, repo: &str, now: u64, retention: u64) -> Result<Vec<api::Version>> {
        let tx = self.db.begin_write()?;
        if volume_row(&tx.open_table(VOLUMES)?, repo)?.is_none() {
            return Err(unknown_volume(repo));
        }
        let names = delete_all(&tx, repo, now)?;
        tx.commit()?;
        names
            .iter()
            .map(|n| self.version(repo, n, retention))
            .collect()
    }

    pub fn set_volume_expiry(
        &self,
        repo: &str,
        expires_at: Option<u64>,
        now: u64,
    ) -> Result<api::Volume> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(VOLUMES)?;
            let mut v = volume_row(&t, repo)?.ok_or_else(|| unknown_volume(repo))?;
            v.expires_at = expires_at;
            v.sequence += 1;
            v.updated_at = now;
            t.insert(repo, serde_json::to_vec(&v)?.as_slice())?;
        }
        tx.commit()?;
        self.volume(repo)
    }

    /// Sets a user tag on an alive version, with an optional expiry.
    pub fn set_tag(
        &self,
        repo: &str,
        tag: &str,
        digest: &str,
        expires_at: Option<u64>,
        now: u64,
    ) -> Result<api::TagInfo> {
        if is_reserved(tag) {
            return Err(VolumeError::TagReserved(tag.to_string()));
        }
        let tx = self.db.begin_write()?;
        if volume_row(&tx.open_table(VOLUMES)?, repo)?.is_none() {
            return Err(unknown_volume(repo));
        }
        let name = version_name(&tx, repo, digest)?.ok_or_else(|| unknown_version(repo, digest))?;
        let rec = version_row(&tx.open_table(VERSIONS)?, repo, &name)?
            .filter(|r| r.lifecycle == Lifecycle::Alive)
            .ok_or_else(|| unknown_version(repo, digest))?;
        put_tag(&tx, repo, tag, &rec.index_digest, expires_at, now)?;
        tx.commit()?;
        Ok(api::TagInfo {
            tag: tag.to_string(),
            digest: b3(&name)?,
            index_digest: sha256(&rec.index_digest)?,
            expires_at: expires_at.map(rfc3339),
        })
    }

    pub fn remove_user_tag(&self, repo: &str, tag: &str, now: u64) -> Result<()> {
        if is_reserved(tag) {
            return Err(VolumeError::TagReserved(tag.to_string()));
        }
        let tx = self.db.begin_write()?;
        if !remove_tag(&tx, repo, tag, now)? {
            return Err(VolumeError::TagUnknown {
                repo: repo.to_string(),
                tag: tag.to_string(),
            });
        }
        tx.commit()?;
        Ok(())
    }
}

/// Tombstones every alive version of `repo`; returns their names.
pub(crate) fn delete_all(tx: &WriteTransaction, repo: &str, now: u64) -> Result<Vec<String>> {
    let (lo, hi) = prefix(&[repo]);
    let alive: Vec<String> = {
        let t = tx.open_table(VERSIONS)?;
        let mut out = Vec::new();
        for row in t.range(lo.as_str()..hi.as_str())? {
            let (k, v) = row?;
            let r: VersionRecord = serde_json::from_slice(v.value())?;
            if r.lifecycle == Lifecycle::Alive {
                out.push(k.value()[repo.len() + 1..].to_string());
            }
        }
        out
    };
    for v in &alive {
        tombstone(tx, repo, v, now)?;
    }
    Ok(alive)
}

/// Repository names, volumes or not.
pub(crate) fn repo_names(tx: &ReadTransaction) -> Result<Vec<String>, MetaError> {
    let mut out = Vec::new();
    for row in tx.open_table(REPOS)?.range::<&str>(..)? {
        out.push(row?.0.value().to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Version records embed the API's lifecycle; whatever the API does
    /// next, records already stored must read as they were written.
    #[test]
    fn stored_records_still_read() {
        let stored = r#"{"index_digest":"sha256:aa","indexes":["sha256:aa"],"sequence":3,"size":10,"files":2,"created_at":100,"lifecycle":"TOMBSTONED","tombstoned_at":200}"#;
        let r: VersionRecord = serde_json::from_str(stored).unwrap();
        assert_eq!(r.lifecycle, Lifecycle::Tombstoned);
        assert_eq!(serde_json::to_string(&r).unwrap(), stored);
        let alive = stored.replace(
            r#""TOMBSTONED","tombstoned_at":200"#,
            r#""ALIVE","tombstoned_at":null"#,
        );
        let r: VersionRecord = serde_json::from_str(&alive).unwrap();
        assert_eq!(r.lifecycle, Lifecycle::Alive);
    }
}
