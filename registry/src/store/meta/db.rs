//! The metadata store itself: [`MetaStore`] over its engine (a redb file
//! in the data folder, or PostgreSQL that replicas share), opened with
//! every table of [`super::schema`] in place. What it keeps, and how each
//! operation reads and writes it in one transaction, is in the files
//! beside this one, by concept: `oci`, `uploads`, `volumes`, `claims`,
//! `keys`, `syncs` and `secrets`, `gc` and `sweeps`, `copy`.

use std::path::Path;

use crate::store::meta::engine::postgres::Pg;
use crate::store::meta::engine::Database;
use crate::store::meta::error::{MetaError, Result};
use crate::store::meta::schema;
use crate::store::meta::secrets::SecretKey;

/// The registry's metadata, on one engine; each method is one transaction.
pub struct MetaStore {
    pub(in crate::store::meta) db: Database,
}

impl MetaStore {
    /// A store in a new temporary folder, for tests: the folder goes
    /// when the returned guard is dropped.
    #[cfg(test)]
    pub(crate) fn temporary() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let m = MetaStore::open(&dir.path().join("meta.redb")).expect("a new metadata store");
        (dir, m)
    }

    pub fn open(path: &Path) -> Result<MetaStore> {
        let db = Database::Redb(redb::Database::create(path)?);
        // Create every table once so that readers never see a missing one.
        let tx = db.begin_write()?;
        schema::create_all(&tx)?;
        tx.commit()?;
        Ok(MetaStore { db })
    }

    /// The metadata in PostgreSQL at `url` (`engine::postgres`), shared by
    /// every replica that connects to it.
    pub fn open_postgres(url: &str, password: Option<&str>) -> Result<MetaStore> {
        Ok(MetaStore {
            db: Database::Postgres(Pg::connect(url, password)?),
        })
    }

    /// Opens the database at `path` after sealing the secrets an earlier
    /// release kept in plaintext. redb is copy-on-write: the pages that
    /// held them are freed, not overwritten, and compaction only moves
    /// pages about. So when there were any, every table is copied into a
    /// fresh file that replaces the old one, and no freed page survives.
    pub fn open_sealing_secrets(path: &Path, key: &SecretKey) -> Result<MetaStore> {
        let meta = MetaStore::open(path)?;
        let sealed = meta.seal_plaintext_secrets(key)?;
        let meta = if sealed == 0 {
            meta
        } else {
            drop(meta);
            rewrite(path)?;
            tracing::warn!(
                "sealed {sealed} sync secret(s) stored in plaintext by an earlier release"
            );
            MetaStore::open(path)?
        };
        let unbound: Vec<String> = meta
            .secrets()?
            .into_iter()
            .filter(|s| s.for_sources.is_empty())
            .map(|s| s.name)
            .collect();
        if !unbound.is_empty() {
            tracing::warn!(
                "sync secret(s) {} are bound to no source, so only admins' jobs may use them; bind each with `sealvol secret bind NAME --for URI`",
                unbound.join(", ")
            );
        }
        Ok(meta)
    }
}

/// Copies every table of the database at `path` into a new file and puts
/// it in its place (a crash before the rename leaves the old file whole).
/// Tables are copied by the types the registry's tables have: keys are
/// text; values bytes, numbers or text.
fn rewrite(path: &Path) -> Result<()> {
    let io = |e: std::io::Error| MetaError(format!("rewriting {}: {e}", path.display()));
    let fresh = path.with_extension("redb.rewrite");
    match std::fs::remove_file(&fresh) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    {
        use redb::ReadableDatabase as _;
        let src = redb::Database::open(path)?;
        let dst = redb::Database::create(&fresh)?;
        let r = src.begin_read()?;
        let w = dst.begin_write()?;
        for handle in r.list_tables()? {
            let name = redb::TableHandle::name(&handle).to_string();
            if !(copy_table::<&[u8]>(&r, &w, &name)?
                || copy_table::<u64>(&r, &w, &name)?
                || copy_table::<&str>(&r, &w, &name)?)
            {
                return Err(MetaError(format!(
                    "rewriting {}: table {name} has types this release does not know",
                    path.display()
                )));
            }
        }
        w.commit()?;
    }
    std::fs::File::open(&fresh)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&fresh, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

/// Copies table `name` if its values are `V`; false when they are not.
fn copy_table<V: redb::Value + 'static>(
    r: &redb::ReadTransaction,
    w: &redb::WriteTransaction,
    name: &str,
) -> Result<bool> {
    let def: redb::TableDefinition<&str, V> = redb::TableDefinition::new(name);
    use redb::ReadableTable as _;
    let src = match r.open_table(def) {
        Ok(t) => t,
        Err(redb::TableError::TableTypeMismatch { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut dst = w.open_table(def)?;
    for row in src.iter()? {
        let (k, v) = row?;
        dst.insert(k.value(), v.value())?;
    }
    Ok(true)
}
