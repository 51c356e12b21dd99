//! A volume's rows as stored: its record (with the totals of its chunk
//! set, `stats`) and its versions' records, and the reads and writes of
//! them that the rest of `volumes` shares.

use serde::{Deserialize, Serialize};

use crate::store::meta::engine::{Bytes, ReadTransaction, ReadableTable, WriteTransaction};
use crate::store::meta::error::MetaError;
use crate::store::meta::schema::{key, prefix, VERSIONS, VOLUMES};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeRecord {
    pub sequence: u64,
    pub updated_at: u64,
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// The totals of the volume's chunk set (`crate::service::volumes`); `None` while
    /// unknown (after a purge, or sealed by an earlier release).
    #[serde(default)]
    pub stats: Option<ChunkTotals>,
    /// Moves on every purge, so that a rebuild of the totals that read
    /// the versions before it does not store them.
    #[serde(default)]
    pub stats_epoch: u64,
}

impl VolumeRecord {
    /// A volume's first record: no versions, so an empty chunk set.
    pub(super) fn first() -> VolumeRecord {
        VolumeRecord {
            stats: Some(Default::default()),
            ..Default::default()
        }
    }
}

/// A stored version's lifecycle is written as the API writes it (`ALIVE`,
/// `TOMBSTONED`); `stored_records_still_read` pins that.
pub use sealvol_spec::api::Lifecycle;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VersionRecord {
    /// The version's current index, which `head`, `b3-<hex>`, its tags and
    /// restores point at: the last stored, except that an index without a
    /// format 2 tree never replaces one with a format 2 tree (`seal`).
    pub index_digest: String,
    /// Every index stored for this version (copy tools may re-serialize
    /// one, a client re-publishes one with a format 2 tree); a delete
    /// hides them all, and garbage collection keeps them all.
    pub indexes: Vec<String>,
    /// Those of `indexes` whose tree manifest holds a format 2 tree index
    /// (SPEC.md §2.5), as seen when each was stored. Records written
    /// before format 2 existed have none, rightly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifiable: Vec<String>,
    pub sequence: u64,
    pub size: Option<u64>,
    pub files: Option<u64>,
    pub created_at: u64,
    pub lifecycle: Lifecycle,
    pub tombstoned_at: Option<u64>,
}

/// The totals of a volume's chunk set.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChunkTotals {
    pub stored_bytes: u64,
    pub chunks: u64,
}

// ---- rows -----------------------------------------------------------------

pub(super) fn volume_row(
    t: &impl ReadableTable<Bytes>,
    repo: &str,
) -> Result<Option<VolumeRecord>, MetaError> {
    match t.get(repo)? {
        Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
        None => Ok(None),
    }
}

pub(super) fn version_row(
    t: &impl ReadableTable<Bytes>,
    repo: &str,
    version: &str,
) -> Result<Option<VersionRecord>, MetaError> {
    match t.get(key(&[repo, version]).as_str())? {
        Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
        None => Ok(None),
    }
}

/// `repo`'s volume record, read in a read transaction.
pub(crate) fn volume_record(
    tx: &ReadTransaction,
    repo: &str,
) -> Result<Option<VolumeRecord>, MetaError> {
    volume_row(&tx.open_table(VOLUMES)?, repo)
}

/// `repo`'s volume record, read in a write transaction.
pub(crate) fn volume_record_rw(
    tx: &WriteTransaction,
    repo: &str,
) -> Result<Option<VolumeRecord>, MetaError> {
    volume_row(&tx.open_table(VOLUMES)?, repo)
}

pub(crate) fn put_volume_record(
    tx: &WriteTransaction,
    repo: &str,
    vol: &VolumeRecord,
) -> Result<(), MetaError> {
    tx.open_table(VOLUMES)?
        .insert(repo, serde_json::to_vec(vol)?.as_slice())?;
    Ok(())
}

/// Every version record of `repo`, in no particular order.
pub(crate) fn version_records(
    tx: &ReadTransaction,
    repo: &str,
) -> Result<Vec<VersionRecord>, MetaError> {
    let (lo, hi) = prefix(&[repo]);
    let mut out = Vec::new();
    for row in tx.open_table(VERSIONS)?.range(lo.as_str()..hi.as_str())? {
        out.push(serde_json::from_slice(row?.1.value())?);
    }
    Ok(out)
}
