//! Garbage collection's rows (SPEC.md §7.4, `crate::service::gc`):
//! expiry of tags and volumes and the purge of versions out of retention,
//! the snapshot marking reads, the sweep that removes what marking doomed
//! (re-checked in its own transaction, which also begins the sweep under
//! the GC lease, [`super::sweeps`]), and the digests still live after it.

use std::collections::{HashMap, HashSet};

use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::WriteTransaction;
use crate::store::meta::error::MetaError;
use crate::store::meta::oci::{drop_manifest, ManifestRecord};
use crate::store::meta::schema::{
    key, prefix, BLOB_LINKS, HIDDEN, LINK_TIMES, MANIFESTS, TAGS, TAG_EXPIRY, UPLOADS,
    UPLOAD_TIMES, VERSIONS, VERSION_OF_INDEX, VOLUMES,
};
use crate::store::meta::sweeps::begin_sweep;
use crate::store::meta::volumes;

/// Expiry and retention, applied (or, dry, counted) before marking.
#[derive(Debug, Default)]
pub(crate) struct Expired {
    pub(crate) tags: u64,
    pub(crate) volumes: u64,
    pub(crate) versions: u64,
    /// `(repo, index digest)` of every purged (or purgeable) index.
    pub(crate) indexes: HashSet<(String, String)>,
}

/// One repository as marking sees it.
#[derive(Debug, Default)]
pub(crate) struct RepoModel {
    /// Digest -> stored_at, for manifests in the OCI view.
    pub(crate) manifests: HashMap<String, u64>,
    /// Digest -> media type, of manifests and hidden indexes.
    pub(crate) media_types: HashMap<String, String>,
    /// Indexes of tombstoned versions still within retention.
    pub(crate) hidden: HashSet<String>,
    pub(crate) tagged: HashSet<String>,
    pub(crate) version_indexes: HashSet<String>,
    /// Digest -> linked_at.
    pub(crate) links: HashMap<String, u64>,
    pub(crate) uploading: bool,
}

/// What the sweep may remove, each re-checked under the lock.
#[derive(Debug, Default)]
pub(crate) struct Doomed {
    /// `(repo, digest, stored_at)`.
    pub(crate) manifests: Vec<(String, String, u64)>,
    /// `(repo, digest)`.
    pub(crate) links: Vec<(String, String)>,
}

impl MetaStore {
    /// Removes expired tags, deletes expired volumes and purges versions
    /// tombstoned longer than `retention` ago; dry, only counts them.
    pub(crate) fn expire(
        &self,
        now: u64,
        retention: u64,
        dry_run: bool,
    ) -> std::result::Result<Expired, MetaError> {
        let mut out = Expired::default();
        let rtx = self.db.begin_read()?;
        let expired_tags: Vec<String> = {
            let mut v = Vec::new();
            for row in rtx.open_table(TAG_EXPIRY)?.range::<&str>(..)? {
                let (k, e) = row?;
                if e.value() <= now {
                    v.push(k.value().to_string());
                }
            }
            v
        };
        let expired_volumes: Vec<String> = {
            let mut v = Vec::new();
            for row in rtx.open_table(VOLUMES)?.range::<&str>(..)? {
                let (k, r) = row?;
                let r: volumes::VolumeRecord = serde_json::from_slice(r.value())?;
                if r.expires_at.is_some_and(|e| e <= now) {
                    v.push(k.value().to_string());
                }
            }
            v
        };
        let purgeable: Vec<(String, String, Vec<String>)> = {
            let mut v = Vec::new();
            for row in rtx.open_table(VERSIONS)?.range::<&str>(..)? {
                let (k, r) = row?;
                let r: volumes::VersionRecord = serde_json::from_slice(r.value())?;
                if r.lifecycle == volumes::Lifecycle::Tombstoned
                    && r.tombstoned_at
                        .is_some_and(|t| t.saturating_add(retention) <= now)
                {
                    let (repo, version) = k.value().split_once('\0').unwrap_or_default();
                    v.push((repo.to_string(), version.to_string(), r.indexes));
                }
            }
            v
        };
        drop(rtx);
        if dry_run {
            out.tags = expired_tags.len() as u64;
            out.volumes = expired_volumes.len() as u64;
            out.versions = purgeable.len() as u64;
            for (repo, _, indexes) in purgeable {
                out.indexes
                    .extend(indexes.into_iter().map(|i| (repo.clone(), i)));
            }
            return Ok(out);
        }
        let tx = self.db.begin_write()?;
        for k in &expired_tags {
            let (repo, tag) = k.split_once('\0').unwrap_or_default();
            // Re-check: the tag may have been set again without expiry.
            let still = tx
                .open_table(TAG_EXPIRY)?
                .get(k.as_str())?
                .is_some_and(|e| e.value() <= now);
            if still && volumes::remove_tag(&tx, repo, tag, now)? {
                out.tags += 1;
            }
        }
        for repo in &expired_volumes {
            volumes::delete_all(&tx, repo, now).map_err(|e| MetaError(e.to_string()))?;
            let mut t = tx.open_table(VOLUMES)?;
            let row = t.get(repo.as_str())?.map(|v| v.value().to_vec());
            if let Some(bytes) = row {
                let mut r: volumes::VolumeRecord = serde_json::from_slice(&bytes)?;
                r.expires_at = None;
                t.insert(repo.as_str(), serde_json::to_vec(&r)?.as_slice())?;
            }
            out.volumes += 1;
        }
        for (repo, version, _) in &purgeable {
            if let Some(indexes) = volumes::purge(&tx, repo, version, now, retention)? {
                out.versions += 1;
                out.indexes
                    .extend(indexes.into_iter().map(|i| (repo.clone(), i)));
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Every repository's manifests, tags, versions and links.
    /// Sessions idle for `upload_ttl` at `now` are abandoned and do not
    /// make their repository busy.
    pub(crate) fn gc_model(
        &self,
        now: u64,
        upload_ttl: u64,
    ) -> std::result::Result<HashMap<String, RepoModel>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut repos: HashMap<String, RepoModel> = HashMap::new();
        for repo in volumes::repo_names(&tx)? {
            repos.insert(repo, RepoModel::default());
        }
        let split = |k: &str| -> (String, String) {
            let (r, d) = k.rsplit_once('\0').unwrap_or((k, ""));
            (r.to_string(), d.to_string())
        };
        for row in tx.open_table(MANIFESTS)?.range::<&str>(..)? {
            let (k, v) = row?;
            let (repo, d) = split(k.value());
            let rec: ManifestRecord = serde_json::from_slice(v.value())?;
            let model = repos.entry(repo).or_default();
            model.manifests.insert(d.clone(), rec.stored_at);
            model.media_types.insert(d, rec.media_type);
        }
        for row in tx.open_table(HIDDEN)?.range::<&str>(..)? {
            let (k, v) = row?;
            let (repo, d) = split(k.value());
            let rec: ManifestRecord = serde_json::from_slice(v.value())?;
            let model = repos.entry(repo).or_default();
            model.hidden.insert(d.clone());
            model.media_types.insert(d, rec.media_type);
        }
        for row in tx.open_table(TAGS)?.range::<&str>(..)? {
            let (k, v) = row?;
            let (repo, _) = split(k.value());
            repos
                .entry(repo)
                .or_default()
                .tagged
                .insert(v.value().to_string());
        }
        for row in tx.open_table(VERSION_OF_INDEX)?.range::<&str>(..)? {
            let (repo, d) = split(row?.0.value());
            repos.entry(repo).or_default().version_indexes.insert(d);
        }
        let times = tx.open_table(LINK_TIMES)?;
        for row in tx.open_table(BLOB_LINKS)?.range::<&str>(..)? {
            let (k, _) = row?;
            let t = times.get(k.value())?.map_or(0, |t| t.value());
            let (repo, d) = split(k.value());
            repos.entry(repo).or_default().links.insert(d, t);
        }
        let upload_times = tx.open_table(UPLOAD_TIMES)?;
        for row in tx.open_table(UPLOADS)?.range::<&str>(..)? {
            let (id, repo) = row?;
            // No time yet: expiry stamps it now (see `stale_uploads`).
            let fresh = upload_times
                .get(id.value())?
                .is_none_or(|t| t.value().saturating_add(upload_ttl) > now);
            if fresh {
                repos.entry(repo.value().to_string()).or_default().uploading = true;
            }
        }
        Ok(repos)
    }

    /// Removes the doomed manifests and links that are still unreferenced
    /// and as old as when they were marked, sparing every repository whose
    /// manifests or tags changed since `model` was read; and begins the
    /// sweep under `lease` (`sweeps`), in the same transaction. Returns
    /// the counts, or `None` (nothing removed) when `lease` lapsed.
    pub(crate) fn sweep(
        &self,
        doomed: &Doomed,
        model: &HashMap<String, RepoModel>,
        old_before: u64,
        lease: &str,
        now: u64,
    ) -> std::result::Result<Option<(u64, u64)>, MetaError> {
        let tx = self.db.begin_write()?;
        if !begin_sweep(&tx, lease, now)? {
            return Ok(None);
        }
        let mut changed: HashMap<&str, bool> = HashMap::new();
        let repos = doomed
            .manifests
            .iter()
            .map(|(r, _, _)| r)
            .chain(doomed.links.iter().map(|(r, _)| r));
        for repo in repos {
            if !changed.contains_key(repo.as_str()) {
                let c = changed_since(&tx, repo, model.get(repo))?;
                changed.insert(repo, c);
            }
        }
        let mut manifests = 0;
        let mut links = 0;
        for (repo, digest, stored_at) in &doomed.manifests {
            if changed[repo.as_str()] {
                continue;
            }
            let k = key(&[repo, digest]);
            let same = match tx.open_table(MANIFESTS)?.get(k.as_str())? {
                Some(v) => {
                    serde_json::from_slice::<ManifestRecord>(v.value())?.stored_at == *stored_at
                }
                None => false,
            };
            let tagged = {
                let tags = tx.open_table(TAGS)?;
                let (lo, hi) = prefix(&[repo]);
                let mut found = false;
                for row in tags.range(lo.as_str()..hi.as_str())? {
                    if row?.1.value() == digest.as_str() {
                        found = true;
                        break;
                    }
                }
                found
            };
            let version = volumes::version_of_index(&tx, repo, digest)?.is_some();
            if same && !tagged && !version {
                drop_manifest(&tx, repo, digest)?;
                manifests += 1;
            }
        }
        for (repo, digest) in &doomed.links {
            if changed[repo.as_str()] {
                continue;
            }
            let k = key(&[repo, digest]);
            let linked_at = tx
                .open_table(LINK_TIMES)?
                .get(k.as_str())?
                .map_or(0, |t| t.value());
            if linked_at < old_before {
                if tx.open_table(BLOB_LINKS)?.remove(k.as_str())?.is_some() {
                    links += 1;
                }
                tx.open_table(LINK_TIMES)?.remove(k.as_str())?;
            }
        }
        tx.commit()?;
        Ok(Some((manifests, links)))
    }

    /// Every digest some repository still links or stores a manifest under.
    pub(crate) fn live_digests(&self) -> std::result::Result<HashSet<String>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut live = HashSet::new();
        let tail = |k: &str| k.rsplit_once('\0').map_or(k, |(_, d)| d).to_string();
        for row in tx.open_table(BLOB_LINKS)?.range::<&str>(..)? {
            live.insert(tail(row?.0.value()));
        }
        for row in tx.open_table(MANIFESTS)?.range::<&str>(..)? {
            live.insert(tail(row?.0.value()));
        }
        for row in tx.open_table(HIDDEN)?.range::<&str>(..)? {
            live.insert(tail(row?.0.value()));
        }
        Ok(live)
    }
}

/// Whether `repo` holds a manifest (or one stored again) or a tagged
/// digest that marking's snapshot `then` did not: it may reference what
/// marking doomed.
fn changed_since(
    tx: &WriteTransaction,
    repo: &str,
    then: Option<&RepoModel>,
) -> std::result::Result<bool, MetaError> {
    let Some(then) = then else {
        return Ok(true);
    };
    let (lo, hi) = prefix(&[repo]);
    for row in tx.open_table(MANIFESTS)?.range(lo.as_str()..hi.as_str())? {
        let (k, v) = row?;
        let d = k.value().rsplit_once('\0').map_or("", |(_, d)| d);
        let rec: ManifestRecord = serde_json::from_slice(v.value())?;
        if then.manifests.get(d) != Some(&rec.stored_at) {
            return Ok(true);
        }
    }
    for row in tx.open_table(TAGS)?.range(lo.as_str()..hi.as_str())? {
        if !then.tagged.contains(row?.1.value()) {
            return Ok(true);
        }
    }
    Ok(false)
}
