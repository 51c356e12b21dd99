//! The row copy of `sealvol serve migrate` (`crate::migrate`): every
//! durable table from one metadata store into another, empty one, in one
//! transaction, whatever engine each is on.

use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::copy_rows;
use crate::store::meta::error::MetaError;
use crate::store::meta::schema::{
    API_KEYS, BLOB_LINKS, HIDDEN, LINK_TIMES, MANIFESTS, REFERRERS, REPOS, SECRETS, SYNC_FILES,
    SYNC_JOBS, SYNC_REUSE, SYNC_SCHEDULES, TAGS, TAG_EXPIRY, VERSIONS, VERSION_OF_INDEX, VOLUMES,
    VOLUME_CHUNKS,
};

impl MetaStore {
    /// Whether the store holds no repository, volume, job, schedule, key or
    /// secret.
    pub fn is_empty(&self) -> Result<bool, MetaError> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(REPOS)?.is_empty()?
            && tx.open_table(VOLUMES)?.is_empty()?
            && tx.open_table(SYNC_JOBS)?.is_empty()?
            && tx.open_table(SYNC_SCHEDULES)?.is_empty()?
            && tx.open_table(API_KEYS)?.is_empty()?
            && tx.open_table(SECRETS)?.is_empty()?)
    }

    /// Copies every durable table but the secrets (sealed under this
    /// registry's key) into `dst`, in one transaction; how many rows.
    pub fn copy_into(&self, dst: &MetaStore) -> Result<u64, MetaError> {
        let r = self.db.begin_read()?;
        let w = dst.db.begin_write()?;
        let mut n = 0;
        n += copy_rows(&r, &w, REPOS)?;
        n += copy_rows(&r, &w, BLOB_LINKS)?;
        n += copy_rows(&r, &w, LINK_TIMES)?;
        n += copy_rows(&r, &w, MANIFESTS)?;
        n += copy_rows(&r, &w, TAGS)?;
        n += copy_rows(&r, &w, REFERRERS)?;
        n += copy_rows(&r, &w, VOLUMES)?;
        n += copy_rows(&r, &w, VERSIONS)?;
        n += copy_rows(&r, &w, VERSION_OF_INDEX)?;
        n += copy_rows(&r, &w, TAG_EXPIRY)?;
        n += copy_rows(&r, &w, HIDDEN)?;
        n += copy_rows(&r, &w, VOLUME_CHUNKS)?;
        n += copy_rows(&r, &w, SYNC_JOBS)?;
        n += copy_rows(&r, &w, SYNC_FILES)?;
        // Reuse records name chunks the migrated blob store holds too.
        n += copy_rows(&r, &w, SYNC_REUSE)?;
        n += copy_rows(&r, &w, SYNC_SCHEDULES)?;
        n += copy_rows(&r, &w, API_KEYS)?;
        w.commit()?;
        Ok(n)
    }
}
