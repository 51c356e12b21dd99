//! What a volume's versions hold and what storing them costs after
//! deduplication (`GET /api/v1/volumes/NAME/-/stats`, SPEC.md §7.3).
//!
//! Stored bytes are the sizes of the distinct chunks of the volume's
//! versions that garbage collection keeps (alive, and deleted but
//! restorable). The registry keeps that set of chunks per volume
//! (`volume_chunks`, one row per chunk with its size) and its totals in
//! the volume's record, and grows them in the transaction that seals a
//! version (the chunk sizes read from its chunk manifests before it), so a
//! read costs nothing. Deletes and restores leave the set alone (a deleted
//! version is still stored); a purge can take chunks out of it, and
//! working out which would need every other version's chunks in the purge
//! transaction, so a purge marks the totals unknown instead and the next
//! read rebuilds them from the versions' manifests. Volumes sealed by a
//! release before this one start unknown the same way.

use std::collections::BTreeMap;

use sealvol_spec::api;
use sealvol_spec::Sha256Digest;

use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::WriteTransaction;
use crate::store::meta::error::MetaError;
use crate::store::meta::schema::{key, prefix, VOLUME_CHUNKS};
use crate::store::meta::volumes::error::VolumeError;
use crate::store::meta::volumes::records::{
    put_volume_record, version_records, volume_record, volume_record_rw, Lifecycle, VolumeRecord,
};

/// The metadata layer's results, with `MetaError` unless said otherwise.
type MetaResult<T, E = MetaError> = std::result::Result<T, E>;

pub use crate::store::meta::volumes::records::ChunkTotals;

/// A version's distinct chunks with their sizes, as its chunk manifests
/// list them.
pub type ChunkSizes = Vec<(Sha256Digest, u64)>;

/// In the transaction that seals a version of `repo`: adds its chunks to
/// the volume's set. `chunks` is `None` when they could not be read; the
/// totals are then unknown until a read rebuilds them.
pub(crate) fn add_sealed(
    tx: &WriteTransaction,
    repo: &str,
    vol: &mut VolumeRecord,
    chunks: Option<&ChunkSizes>,
) -> MetaResult<()> {
    let (Some(totals), Some(chunks)) = (vol.stats.as_mut(), chunks) else {
        vol.stats = None;
        return Ok(());
    };
    // The volume's set in one read, then the new chunks in one write: on
    // a shared engine a row at a time would hold every writer off for a
    // round trip per chunk of the version.
    let mut t = tx.open_table(VOLUME_CHUNKS)?;
    let (lo, hi) = prefix(&[repo]);
    let mut known = std::collections::HashSet::new();
    for row in t.range(lo.as_str()..hi.as_str())? {
        known.insert(row?.0.value().to_string());
    }
    let mut new = Vec::new();
    for (digest, size) in chunks {
        let k = key(&[repo, &digest.to_string()]);
        if !known.contains(&k) {
            totals.stored_bytes += size;
            totals.chunks += 1;
            new.push((k, *size));
        }
    }
    t.insert_many(new)?;
    Ok(())
}

/// In the transaction that purges a version of `repo`: its chunks may
/// leave the set, so the totals are unknown until rebuilt.
pub(crate) fn purged(vol: &mut VolumeRecord) {
    vol.stats = None;
    vol.stats_epoch += 1;
}

/// What a stats read found: the totals, or what rebuilding them needs.
pub(crate) struct Read {
    pub stats: api::VolumeStats,
    /// `None`: unknown; rebuild from these versions' current indexes.
    pub totals: Option<ChunkTotals>,
    pub indexes: Vec<String>,
    /// The volume's sequence and stats epoch when read: a rebuild stores
    /// its result only if neither moved.
    pub stamp: (u64, u64),
}

impl MetaStore {
    /// The counts of `repo`'s kept versions and its chunk totals, if known.
    pub(crate) fn read_stats(
        &self,
        repo: &str,
        retention: u64,
        now: u64,
    ) -> MetaResult<Read, VolumeError> {
        let tx = self.db.begin_read()?;
        let vol = volume_record(&tx, repo)?
            .ok_or_else(|| VolumeError::VolumeUnknown(repo.to_string()))?;
        let mut stats = api::VolumeStats {
            name: repo.to_string(),
            ..Default::default()
        };
        let mut indexes = Vec::new();
        for r in version_records(&tx, repo)? {
            let kept = match r.lifecycle {
                Lifecycle::Alive => true,
                Lifecycle::Tombstoned => r
                    .tombstoned_at
                    .is_some_and(|t| t.saturating_add(retention) > now),
            };
            if kept {
                stats.versions += 1;
                stats.logical_bytes += r.size.unwrap_or(0);
                indexes.push(r.index_digest.clone());
            }
        }
        if let Some(t) = vol.stats {
            stats.stored_bytes = t.stored_bytes;
            stats.chunks = t.chunks;
        }
        Ok(Read {
            stats,
            totals: vol.stats,
            indexes,
            stamp: (vol.sequence, vol.stats_epoch),
        })
    }

    /// Stores a rebuilt chunk set of `repo` unless the volume changed
    /// since `stamp` (another seal or purge; the next read rebuilds).
    pub(crate) fn store_stats(
        &self,
        repo: &str,
        stamp: (u64, u64),
        set: &BTreeMap<Sha256Digest, u64>,
    ) -> MetaResult<()> {
        let tx = self.db.begin_write()?;
        let Some(mut vol) = volume_record_rw(&tx, repo)? else {
            return Ok(());
        };
        if (vol.sequence, vol.stats_epoch) != stamp || vol.stats.is_some() {
            return Ok(());
        }
        let mut t = tx.open_table(VOLUME_CHUNKS)?;
        let (lo, hi) = prefix(&[repo]);
        let mut stale = Vec::new();
        for row in t.range(lo.as_str()..hi.as_str())? {
            let (k, _) = row?;
            let digest = &k.value()[repo.len() + 1..];
            if !digest
                .parse()
                .is_ok_and(|d: Sha256Digest| set.contains_key(&d))
            {
                stale.push(k.value().to_string());
            }
        }
        t.remove_many(&stale)?;
        let mut totals = ChunkTotals::default();
        let mut rows = Vec::with_capacity(set.len());
        for (digest, size) in set {
            rows.push((key(&[repo, &digest.to_string()]), *size));
            totals.stored_bytes += size;
            totals.chunks += 1;
        }
        t.insert_many(rows)?;
        drop(t);
        vol.stats = Some(totals);
        put_volume_record(&tx, repo, &vol)?;
        tx.commit()?;
        Ok(())
    }
}
