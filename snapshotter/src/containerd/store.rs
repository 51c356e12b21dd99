//! Snapshots as the snapshotter keeps them: a record per snapshot in redb
//! (kind, parent, labels, times, a numeric id), and per id a folder under
//! `ROOT/snapshots/ID` with `fs` (the snapshot's files, the upper dir while
//! it is active) and `work` (overlayfs's work dir). This is the model of
//! containerd's overlayfs snapshotter, so ordinary image layers unpack and
//! mount as they would there: a chain of committed snapshots becomes the
//! `lowerdir` of an overlay mount.
//!
//! Keys are containerd's, opaque here (its metadata store prefixes them
//! with a namespace). Active, view and committed snapshots share one name
//! space, as in containerd. Every change is one redb transaction, so a
//! crash leaves a record whole or absent; a folder without a record is
//! removed by [`SnapshotStore::cleanup`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::idmap::IdMap;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use sealvol_spec::oci::{ViewPointer, VIEW_FILE};
use serde::{Deserialize, Serialize};

/// key -> [`Record`] JSON.
const SNAPSHOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshots");
/// `"next_id"` -> the id the next snapshot gets.
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// What kind of snapshot a record is (containerd's `snapshots.Kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    View,
    Active,
    Committed,
}

/// One snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: u64,
    pub kind: Kind,
    /// The committed snapshot this one is on top of; empty for none.
    pub parent: String,
    pub labels: BTreeMap<String, String>,
    /// Nanoseconds since the Unix epoch.
    pub created_at: u128,
    pub updated_at: u128,
    /// Bytes and inodes of `fs`, measured when committed.
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub inodes: u64,
    /// For a sealed version mounted lazily at `fs` in place of its view
    /// layer: the pinned ref it mounts (`HOST/NS/VOL@b3:<hex>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Why an operation was refused, in containerd's error classes.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("snapshot {0} already exists")]
    AlreadyExists(String),
    #[error("snapshot {0} does not exist")]
    NotFound(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("snapshot store: {0}")]
    Internal(String),
}

macro_rules! internal_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Internal(e.to_string())
            }
        }
    )*};
}
internal_from!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    serde_json::Error,
    std::io::Error
);

type Result<T> = std::result::Result<T, StoreError>;

/// A sealed version a user-namespaced snapshot is on, mounted once more
/// for it ([`SnapshotStore::mapped_versions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedVersion {
    /// The pinned ref, as the version's own snapshot records it.
    pub reference: String,
    /// Where, in the user-namespaced snapshot's folder.
    pub at: PathBuf,
    /// `(uid, gid)` every entry is presented as owned by.
    pub owner: (u32, u32),
}

/// A mount containerd performs (its `types.Mount`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    pub kind: String,
    pub source: String,
    pub options: Vec<String>,
}

pub struct SnapshotStore {
    root: PathBuf,
    db: Database,
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A new snapshot's id, never given before (its folder's name).
fn next_id(tx: &redb::WriteTransaction) -> Result<u64> {
    let mut counters = tx.open_table(COUNTERS)?;
    let id = counters.get("next_id")?.map_or(1, |v| v.value());
    counters.insert("next_id", id + 1)?;
    Ok(id)
}

impl SnapshotStore {
    /// Opens (or makes) the store under `root`.
    pub fn open(root: &Path) -> Result<SnapshotStore> {
        std::fs::create_dir_all(root.join("snapshots"))?;
        // As containerd's own snapshotters: image layers and the metadata
        // are root's alone; containers see them through their mounts.
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
        }
        let db = Database::create(root.join("metadata.redb"))?;
        let tx = db.begin_write()?;
        tx.open_table(SNAPSHOTS)?;
        tx.open_table(COUNTERS)?;
        tx.commit()?;
        Ok(SnapshotStore {
            root: root.to_path_buf(),
            db,
        })
    }

    fn dir(&self, id: u64) -> PathBuf {
        self.root.join("snapshots").join(id.to_string())
    }

    /// Where snapshot `id`'s files are (a sealed version's mount point).
    pub fn fs(&self, id: u64) -> PathBuf {
        self.dir(id).join("fs")
    }

    /// A committed snapshot `name` on `parent` whose files are the sealed
    /// version `reference`, mounted at its `fs` by the caller. Its size is
    /// not measured: walking it would fetch the version.
    pub fn create_version(
        &self,
        name: &str,
        parent: &str,
        labels: BTreeMap<String, String>,
        reference: &str,
    ) -> Result<Record> {
        let tx = self.db.begin_write()?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS)?;
            if t.get(name)?.is_some() {
                return Err(StoreError::AlreadyExists(name.to_string()));
            }
            if !parent.is_empty() && t.get(parent)?.is_none() {
                return Err(StoreError::NotFound(parent.to_string()));
            }
            let id = next_id(&tx)?;
            let now = now_nanos();
            let record = Record {
                id,
                kind: Kind::Committed,
                parent: parent.to_string(),
                labels,
                created_at: now,
                updated_at: now,
                size: 0,
                inodes: 0,
                version: Some(reference.to_string()),
            };
            std::fs::create_dir_all(self.fs(id))?;
            t.insert(name, serde_json::to_vec(&record)?.as_slice())?;
            record
        };
        tx.commit()?;
        Ok(record)
    }

    pub fn get(&self, key: &str) -> Result<Record> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(SNAPSHOTS)?;
        let row = t.get(key)?;
        match row {
            Some(v) => Ok(serde_json::from_slice(v.value())?),
            None => Err(StoreError::NotFound(key.to_string())),
        }
    }

    /// Every snapshot, by key.
    pub fn list(&self) -> Result<Vec<(String, Record)>> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for row in tx.open_table(SNAPSHOTS)?.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_string(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    /// A new active (`Kind::Active`) or view snapshot `key` on `parent`,
    /// with its folders, and the mounts that give it.
    pub fn create(
        &self,
        kind: Kind,
        key: &str,
        parent: &str,
        labels: BTreeMap<String, String>,
    ) -> Result<(Record, Vec<MountSpec>)> {
        if key.is_empty() {
            return Err(StoreError::InvalidArgument("a snapshot needs a key".into()));
        }
        let idmap = IdMap::from_labels(&labels)
            .map_err(|e| StoreError::InvalidArgument(format!("snapshot {key}: {e}")))?;
        let tx = self.db.begin_write()?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS)?;
            if t.get(key)?.is_some() {
                return Err(StoreError::AlreadyExists(key.to_string()));
            }
            if !parent.is_empty() {
                let p: Record = match t.get(parent)? {
                    Some(v) => serde_json::from_slice(v.value())?,
                    None => return Err(StoreError::NotFound(parent.to_string())),
                };
                if p.kind != Kind::Committed {
                    return Err(StoreError::FailedPrecondition(format!(
                        "parent {parent} is not a committed snapshot"
                    )));
                }
            }
            let id = next_id(&tx)?;
            let now = now_nanos();
            let record = Record {
                id,
                kind,
                parent: parent.to_string(),
                labels,
                created_at: now,
                updated_at: now,
                size: 0,
                inodes: 0,
                version: None,
            };
            // The folders first: a record never names a folder that is
            // not there, and a folder without a record is cleaned up.
            let dir = self.dir(id);
            std::fs::create_dir_all(dir.join("fs"))?;
            if kind == Kind::Active {
                std::fs::create_dir_all(dir.join("work"))?;
            }
            // What the pod's root writes goes to the upper dir, which it
            // must own (containerd's overlayfs snapshotter does the same).
            if let Some(m) = &idmap {
                std::os::unix::fs::lchown(dir.join("fs"), Some(m.root.0), Some(m.root.1))?;
            }
            t.insert(key, serde_json::to_vec(&record)?.as_slice())?;
            record
        };
        // Refused before the commit: the mounts must be possible.
        let mounts = match self
            .lowers_in(&tx, &record)
            .and_then(|lowers| self.mounts_of_lowers(&record, &lowers))
        {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_dir_all(self.dir(record.id));
                return Err(e);
            }
        };
        tx.commit()?;
        Ok((record, mounts))
    }

    /// The sealed versions among `r`'s parents that must be mounted once
    /// more for it, owned by its user namespace's root, in `r`'s folder.
    /// None without id mapping labels, and none for a committed snapshot
    /// (no mount of its own names them).
    pub fn mapped_versions(&self, r: &Record) -> Result<Vec<MappedVersion>> {
        if r.kind == Kind::Committed {
            return Ok(Vec::new());
        }
        let Some(m) = IdMap::from_labels(&r.labels).map_err(StoreError::InvalidArgument)? else {
            return Ok(Vec::new());
        };
        Ok(self
            .lowers(r)?
            .into_iter()
            .filter_map(|l| {
                let reference = l.version?;
                Some(MappedVersion {
                    reference,
                    at: self.mapped_fs(r.id, l.id),
                    owner: m.root,
                })
            })
            .collect())
    }

    /// Where snapshot `id` has the version snapshot `lower` mounted for
    /// its user namespace.
    fn mapped_fs(&self, id: u64, lower: u64) -> PathBuf {
        self.dir(id).join("idmapped").join(lower.to_string())
    }

    /// The mounts of the active or view snapshot `key`.
    pub fn mounts(&self, key: &str) -> Result<Vec<MountSpec>> {
        let r = self.get(key)?;
        if r.kind == Kind::Committed {
            return Err(StoreError::FailedPrecondition(format!(
                "snapshot {key} is committed; only active and view snapshots mount"
            )));
        }
        self.mounts_of(&r)
    }

    /// `r`'s parents, nearest first.
    fn lowers(&self, r: &Record) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        let mut parent = r.parent.clone();
        while !parent.is_empty() {
            let p = self.get(&parent)?;
            parent = p.parent.clone();
            out.push(p);
        }
        Ok(out)
    }

    /// [`Self::lowers`] within the write transaction creating `r`.
    fn lowers_in(&self, tx: &redb::WriteTransaction, r: &Record) -> Result<Vec<Record>> {
        let t = tx.open_table(SNAPSHOTS)?;
        let mut out = Vec::new();
        let mut parent = r.parent.clone();
        while !parent.is_empty() {
            let p: Record = match t.get(parent.as_str())? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(StoreError::NotFound(parent)),
            };
            parent = p.parent.clone();
            out.push(p);
        }
        Ok(out)
    }

    fn mounts_of(&self, r: &Record) -> Result<Vec<MountSpec>> {
        self.mounts_of_lowers(r, &self.lowers(r)?)
    }

    /// As containerd's overlayfs snapshotter: a snapshot without parents
    /// is a bind mount of its folder; a view of one layer a read-only bind
    /// of that layer; otherwise an overlay of the parents, with the
    /// snapshot's own folder as the upper dir when it is active.
    ///
    /// With id mapping labels ([`IdMap`]), ordinary layers are idmapped
    /// by containerd from the `uidmap=`/`gidmap=` options, and sealed
    /// versions are their mounts owned by the pod's root
    /// ([`Self::mapped_versions`]). The two do not mix: containerd idmaps
    /// every lower dir of a mount through one idmapped mount of their
    /// common folder, which would not show a FUSE mount under it.
    fn mounts_of_lowers(&self, r: &Record, parents: &[Record]) -> Result<Vec<MountSpec>> {
        let idmap = IdMap::from_labels(&r.labels).map_err(StoreError::InvalidArgument)?;
        let versions = parents.iter().filter(|p| p.version.is_some()).count();
        let mut options: Vec<String> = Vec::new();
        if let Some(m) = &idmap {
            if versions > 0 && versions < parents.len() {
                return Err(StoreError::FailedPrecondition(format!(
                    "snapshot {} is on both sealed versions and ordinary layers, whose ids cannot be mapped together",
                    r.parent
                )));
            }
            if versions == 0 && !parents.is_empty() {
                options.extend(m.mount_options());
            }
        }
        let lowers: Vec<PathBuf> = parents
            .iter()
            .map(|p| match (&idmap, &p.version) {
                (Some(_), Some(_)) => self.mapped_fs(r.id, p.id),
                _ => self.fs(p.id),
            })
            .collect();
        let show = |p: &Path| p.display().to_string();
        let bind = |source: &Path, rw: &str| MountSpec {
            kind: "bind".into(),
            source: show(source),
            options: options
                .iter()
                .cloned()
                .chain([rw.into(), "rbind".into()])
                .collect(),
        };
        let mount = match (r.kind, lowers.as_slice()) {
            (Kind::Active, []) => bind(&self.fs(r.id), "rw"),
            (_, []) => bind(&self.fs(r.id), "ro"),
            (Kind::View, [only]) => bind(only, "ro"),
            (kind, _) => {
                let lowerdir = lowers.iter().map(|p| show(p)).collect::<Vec<_>>().join(":");
                if kind == Kind::Active {
                    options.push(format!("workdir={}", show(&self.dir(r.id).join("work"))));
                    options.push(format!("upperdir={}", show(&self.fs(r.id))));
                }
                options.push(format!("lowerdir={lowerdir}"));
                MountSpec {
                    kind: "overlay".into(),
                    source: "overlay".into(),
                    options,
                }
            }
        };
        Ok(vec![mount])
    }

    /// What the active snapshot `key` holds when it is a sealed version's
    /// unpacked view layer (SPEC.md §5.1): no parent, and in its folder
    /// only `.sealvol/version.json`. None for anything else.
    pub fn view_pointer(&self, key: &str) -> Result<Option<ViewPointer>> {
        let r = self.get(key)?;
        if r.kind != Kind::Active || !r.parent.is_empty() {
            return Ok(None);
        }
        let fs = self.fs(r.id);
        let names = |dir: &Path| -> Result<Vec<std::ffi::OsString>> {
            std::fs::read_dir(dir)?
                .map(|e| Ok(e?.file_name()))
                .collect()
        };
        let dir = fs.join(".sealvol");
        if names(&fs)? != [".sealvol"] || names(&dir)? != ["version.json"] {
            return Ok(None);
        }
        let file = fs.join(VIEW_FILE);
        let meta = std::fs::symlink_metadata(&file)?;
        if !meta.is_file() || meta.len() > ViewPointer::MAX_LEN {
            return Ok(None);
        }
        Ok(serde_json::from_slice(&std::fs::read(file)?).ok())
    }

    /// Commits the active snapshot `key` as `name`: the same folder, now
    /// read-only to containerd and a possible parent. With `version`, the
    /// folder has had that sealed version mounted over it (its unpacked
    /// view layer, [`Self::view_pointer`]) and is not measured.
    pub fn commit(
        &self,
        name: &str,
        key: &str,
        labels: BTreeMap<String, String>,
        version: Option<String>,
    ) -> Result<()> {
        if name.is_empty() {
            return Err(StoreError::InvalidArgument("a commit needs a name".into()));
        }
        let active = self.get(key)?;
        if active.kind != Kind::Active {
            return Err(StoreError::FailedPrecondition(format!(
                "snapshot {key} is not active; only an active snapshot is committed"
            )));
        }
        // Measured before the transaction: the folder no longer changes.
        // Walking a mounted version would fetch nothing, but is no measure
        // of what the node stores.
        let (size, inodes) = match version {
            Some(_) => (0, 0),
            None => usage(&self.fs(active.id))?,
        };
        let work = self.dir(active.id).join("work");
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(SNAPSHOTS)?;
            if t.get(name)?.is_some() {
                return Err(StoreError::AlreadyExists(name.to_string()));
            }
            let current: Record = match t.remove(key)? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(StoreError::NotFound(key.to_string())),
            };
            let now = now_nanos();
            let committed = Record {
                kind: Kind::Committed,
                labels,
                created_at: now,
                updated_at: now,
                size,
                inodes,
                version: version.or(current.version),
                ..current
            };
            t.insert(name, serde_json::to_vec(&committed)?.as_slice())?;
        }
        tx.commit()?;
        // overlayfs leaves a `work/work` folder it owns; a committed
        // snapshot has no upper dir, so it goes.
        let _ = std::fs::remove_dir_all(work);
        Ok(())
    }

    /// `key`'s record, when it could be removed now: it exists and no
    /// snapshot is on it.
    pub fn removable(&self, key: &str) -> Result<Record> {
        let r = self.get(key)?;
        if self.list()?.iter().any(|(_, c)| c.parent == key) {
            return Err(StoreError::FailedPrecondition(format!(
                "snapshot {key} has children; remove them first"
            )));
        }
        Ok(r)
    }

    /// Removes `key` and its folder; a snapshot others are on is kept.
    pub fn remove(&self, key: &str) -> Result<()> {
        let tx = self.db.begin_write()?;
        let id = {
            let mut t = tx.open_table(SNAPSHOTS)?;
            let mut has_child = false;
            for row in t.iter()? {
                let (_, v) = row?;
                let r: Record = serde_json::from_slice(v.value())?;
                if r.parent == key {
                    has_child = true;
                    break;
                }
            }
            if has_child {
                return Err(StoreError::FailedPrecondition(format!(
                    "snapshot {key} has children; remove them first"
                )));
            }
            let r: Record = match t.remove(key)? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(StoreError::NotFound(key.to_string())),
            };
            r.id
        };
        tx.commit()?;
        std::fs::remove_dir_all(self.dir(id)).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        })?;
        Ok(())
    }

    /// Sets `key`'s labels: all of them when `paths` is empty, else those
    /// `labels.NAME` names (a name absent from `labels` is removed).
    pub fn update_labels(
        &self,
        key: &str,
        labels: BTreeMap<String, String>,
        paths: &[String],
    ) -> Result<Record> {
        let tx = self.db.begin_write()?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS)?;
            let mut r: Record = match t.get(key)? {
                Some(v) => serde_json::from_slice(v.value())?,
                None => return Err(StoreError::NotFound(key.to_string())),
            };
            if paths.is_empty() {
                r.labels = labels;
            } else {
                for p in paths {
                    if p == "labels" {
                        r.labels = labels.clone();
                        continue;
                    }
                    let Some(name) = p.strip_prefix("labels.") else {
                        return Err(StoreError::InvalidArgument(format!(
                            "cannot update {p}; only labels change"
                        )));
                    };
                    match labels.get(name) {
                        Some(v) => r.labels.insert(name.to_string(), v.clone()),
                        None => r.labels.remove(name),
                    };
                }
            }
            r.updated_at = now_nanos();
            t.insert(key, serde_json::to_vec(&r)?.as_slice())?;
            r
        };
        tx.commit()?;
        Ok(record)
    }

    /// Bytes and inodes `key` uses: measured now while it is active,
    /// recorded at commit otherwise.
    pub fn usage(&self, key: &str) -> Result<(u64, u64)> {
        let r = self.get(key)?;
        match r.kind {
            Kind::Committed => Ok((r.size, r.inodes)),
            _ => Ok(usage(&self.fs(r.id))?),
        }
    }

    /// Removes the folders no record names (left by a crash between
    /// making a folder and recording it, or a failed removal).
    pub fn cleanup(&self) -> Result<usize> {
        let live: std::collections::HashSet<u64> =
            self.list()?.into_iter().map(|(_, r)| r.id).collect();
        let mut removed = 0;
        for entry in std::fs::read_dir(self.root.join("snapshots"))? {
            let entry = entry?;
            let id = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok());
            if id.is_some_and(|id| !live.contains(&id)) {
                std::fs::remove_dir_all(entry.path())?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Bytes (of regular files, counted once per inode) and inodes under `dir`.
fn usage(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            inodes += 1;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                bytes += meta.blocks() * 512;
            }
        }
    }
    Ok((bytes, inodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn layers_chain_into_overlay_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let s = SnapshotStore::open(dir.path()).unwrap();
        let (r1, m1) = s.create(Kind::Active, "a1", "", labels(&[])).unwrap();
        assert_eq!(m1[0].kind, "bind");
        assert_eq!(m1[0].options, ["rw", "rbind"]);
        std::fs::write(s.fs(r1.id).join("f"), b"one").unwrap();
        s.commit("l1", "a1", labels(&[("x", "1")]), None).unwrap();
        assert!(matches!(s.get("a1"), Err(StoreError::NotFound(_))));
        let l1 = s.get("l1").unwrap();
        assert_eq!(
            (l1.kind, l1.id, l1.labels.len()),
            (Kind::Committed, r1.id, 1)
        );
        assert!(l1.size > 0 && l1.inodes == 1);

        let (_, view) = s.create(Kind::View, "v", "l1", labels(&[])).unwrap();
        assert_eq!(view[0].kind, "bind");
        assert_eq!(view[0].options, ["ro", "rbind"]);
        let (r2, m2) = s.create(Kind::Active, "a2", "l1", labels(&[])).unwrap();
        assert_eq!(m2[0].kind, "overlay");
        let lower = format!("lowerdir={}", s.fs(r1.id).display());
        assert_eq!(m2[0].options.last().unwrap(), &lower);
        assert!(m2[0].options[1].ends_with(&format!("{}/fs", r2.id)));
        s.commit("l2", "a2", labels(&[]), None).unwrap();
        let (_, v2) = s.create(Kind::View, "v2", "l2", labels(&[])).unwrap();
        assert_eq!(v2[0].kind, "overlay");
        assert_eq!(v2[0].options.len(), 1, "a view has no upper dir: {v2:?}");

        assert!(matches!(
            s.create(Kind::Active, "a2x", "v", labels(&[])),
            Err(StoreError::FailedPrecondition(_))
        ));
        assert!(matches!(
            s.create(Kind::Active, "l1", "", labels(&[])),
            Err(StoreError::AlreadyExists(_))
        ));
        assert!(matches!(
            s.remove("l1"),
            Err(StoreError::FailedPrecondition(_))
        ));
        for k in ["v2", "l2", "v", "l1"] {
            s.remove(k).unwrap();
        }
        assert!(s.list().unwrap().is_empty());
        assert!(!s.fs(r1.id).exists());
    }

    /// A user-namespaced pod's snapshots: the upper dir owned by the
    /// pod's root; ordinary layers idmapped by containerd from the mount
    /// options; a sealed version through its own mount for the snapshot,
    /// which the service has the fuse manager make owned by that root.
    #[test]
    fn id_mapped_snapshots_are_owned_by_the_pods_root() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let s = SnapshotStore::open(dir.path()).unwrap();
        let map = labels(&[
            (super::super::idmap::LABEL_UID_MAPPING, "0:200000:65536"),
            (super::super::idmap::LABEL_GID_MAPPING, "0:300000:65536"),
        ]);
        s.create(Kind::Active, "a1", "", labels(&[])).unwrap();
        s.commit("l1", "a1", labels(&[]), None).unwrap();
        let (r, m) = s.create(Kind::Active, "pod", "l1", map.clone()).unwrap();
        let meta = std::fs::metadata(s.fs(r.id)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (200000, 300000));
        assert_eq!(m[0].kind, "overlay");
        assert_eq!(
            m[0].options[..2],
            ["uidmap=0:200000:65536", "gidmap=0:300000:65536"]
        );
        assert!(s.mapped_versions(&r).unwrap().is_empty());

        let reference = format!("127.0.0.1:5000/w/q@b3:{}", "ab".repeat(32));
        let v = s
            .create_version("version", "", labels(&[]), &reference)
            .unwrap();
        let (r, m) = s
            .create(Kind::Active, "vol", "version", map.clone())
            .unwrap();
        let mapped = s.mapped_versions(&r).unwrap();
        assert_eq!(mapped.len(), 1, "{mapped:?}");
        assert_eq!(mapped[0].reference, reference);
        assert_eq!(mapped[0].owner, (200000, 300000));
        let lowerdir = format!("lowerdir={}", mapped[0].at.display());
        assert_eq!(m[0].options.last(), Some(&lowerdir), "{m:?}");
        assert!(
            !m[0].options.iter().any(|o| o.starts_with("uidmap=")),
            "a FUSE lower cannot be idmapped by containerd: {m:?}"
        );
        assert_ne!(mapped[0].at, s.fs(v.id));
        // Without labels the version's own mount is the lower dir.
        let (_, m) = s
            .create(Kind::View, "plain", "version", labels(&[]))
            .unwrap();
        assert_eq!(m[0].source, s.fs(v.id).display().to_string());

        // A version under an ordinary layer cannot be mapped; nothing is
        // left of the refused snapshot.
        s.create(Kind::Active, "a2", "version", labels(&[]))
            .unwrap();
        s.commit("l2", "a2", labels(&[]), None).unwrap();
        let before = std::fs::read_dir(dir.path().join("snapshots"))
            .unwrap()
            .count();
        assert!(matches!(
            s.create(Kind::Active, "mixed", "l2", map),
            Err(StoreError::FailedPrecondition(_))
        ));
        assert!(matches!(s.get("mixed"), Err(StoreError::NotFound(_))));
        let after = std::fs::read_dir(dir.path().join("snapshots"))
            .unwrap()
            .count();
        assert_eq!(before, after);
        assert!(matches!(
            s.create(
                Kind::Active,
                "bad",
                "l1",
                labels(&[(super::super::idmap::LABEL_UID_MAPPING, "0:1:1")])
            ),
            Err(StoreError::InvalidArgument(_))
        ));
    }

    #[test]
    fn only_a_lone_pointer_file_is_a_view_layer() {
        let dir = tempfile::tempdir().unwrap();
        let s = SnapshotStore::open(dir.path()).unwrap();
        let body = format!(
            "{{\"version\":\"b3:{}\",\"tree\":\"sha256:{}\"}}\n",
            "ab".repeat(32),
            "cd".repeat(32)
        );
        let (r, _) = s.create(Kind::Active, "k", "", labels(&[])).unwrap();
        let fs = s.fs(r.id);
        assert_eq!(s.view_pointer("k").unwrap(), None, "an empty layer");
        std::fs::create_dir(fs.join(".sealvol")).unwrap();
        std::fs::write(fs.join(VIEW_FILE), &body).unwrap();
        let p = s.view_pointer("k").unwrap().expect("the pointer");
        assert_eq!(p.version.to_string(), format!("b3:{}", "ab".repeat(32)));
        std::fs::write(fs.join("other"), b"x").unwrap();
        assert_eq!(s.view_pointer("k").unwrap(), None, "a file beside it");
        std::fs::remove_file(fs.join("other")).unwrap();
        std::fs::write(fs.join(VIEW_FILE), "not json").unwrap();
        assert_eq!(s.view_pointer("k").unwrap(), None, "a file not a pointer");
        std::fs::write(fs.join(VIEW_FILE), &body).unwrap();
        let reference = "reg.example/w/v@b3:ab";
        s.commit("c", "k", labels(&[]), Some(reference.into()))
            .unwrap();
        let c = s.get("c").unwrap();
        assert_eq!((c.version.as_deref(), c.size), (Some(reference), 0));
    }

    #[test]
    fn labels_update_by_path_and_orphans_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let s = SnapshotStore::open(dir.path()).unwrap();
        s.create(Kind::Active, "k", "", labels(&[("a", "1"), ("b", "2")]))
            .unwrap();
        let r = s
            .update_labels(
                "k",
                labels(&[("a", "9")]),
                &["labels.a".into(), "labels.b".into()],
            )
            .unwrap();
        assert_eq!(r.labels, labels(&[("a", "9")]));
        assert!(s.update_labels("k", labels(&[]), &["name".into()]).is_err());
        std::fs::create_dir_all(dir.path().join("snapshots/999/fs")).unwrap();
        assert_eq!(s.cleanup().unwrap(), 1);
        assert!(s.get("k").is_ok());
    }
}
