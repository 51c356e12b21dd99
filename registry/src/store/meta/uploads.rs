//! Upload sessions' rows: which repository each session uploads to and
//! when it was last written to, so that an idle one can be abandoned.
//! Its bytes are in the blob store; finishing one links the blob in the
//! same transaction (`oci`).

use crate::store::meta::db::MetaStore;
use crate::store::meta::error::Result;
use crate::store::meta::oci::link;
use crate::store::meta::schema::{UPLOADS, UPLOAD_TIMES};

impl MetaStore {
    pub fn put_upload(&self, id: &str, repo: &str, now: u64) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(UPLOADS)?.insert(id, repo)?;
        tx.open_table(UPLOAD_TIMES)?.insert(id, now)?;
        tx.commit()?;
        Ok(())
    }

    /// Records that upload `id` was written to at `now`, if it still exists.
    pub fn touch_upload(&self, id: &str, now: u64) -> Result<()> {
        let tx = self.db.begin_write()?;
        if tx.open_table(UPLOADS)?.get(id)?.is_some() {
            tx.open_table(UPLOAD_TIMES)?.insert(id, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Sessions idle since `now - ttl` or longer. A session without a
    /// time (older than the time table) is stamped `now` instead.
    pub fn stale_uploads(&self, now: u64, ttl: u64) -> Result<Vec<String>> {
        let tx = self.db.begin_write()?;
        let mut stale = Vec::new();
        {
            let uploads = tx.open_table(UPLOADS)?;
            let mut times = tx.open_table(UPLOAD_TIMES)?;
            let mut unstamped = Vec::new();
            for row in uploads.range::<&str>(..)? {
                let (id, _) = row?;
                let id = id.value().to_string();
                match times.get(id.as_str())?.map(|t| t.value()) {
                    Some(t) if t.saturating_add(ttl) <= now => stale.push(id),
                    Some(_) => {}
                    None => unstamped.push(id),
                }
            }
            for id in unstamped {
                times.insert(id.as_str(), now)?;
            }
        }
        tx.commit()?;
        Ok(stale)
    }

    /// Ends session `id` if it is still idle since `now - ttl` (a write
    /// may have come in since [`Self::stale_uploads`]); true when it did.
    pub fn end_stale_upload(&self, id: &str, now: u64, ttl: u64) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let stale = tx
            .open_table(UPLOAD_TIMES)?
            .get(id)?
            .is_some_and(|t| t.value().saturating_add(ttl) <= now);
        if stale {
            tx.open_table(UPLOADS)?.remove(id)?;
            tx.open_table(UPLOAD_TIMES)?.remove(id)?;
        }
        tx.commit()?;
        Ok(stale)
    }

    pub fn upload_repo(&self, id: &str) -> Result<Option<String>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(UPLOADS)?;
        Ok(t.get(id)?.map(|v| v.value().to_string()))
    }

    /// Ends an upload session; with `blob`, makes it visible in the
    /// session's repository in the same transaction.
    pub fn finish_upload(&self, id: &str, blob: Option<(&str, &str, u64)>, now: u64) -> Result<()> {
        let tx = self.db.begin_write()?;
        {
            tx.open_table(UPLOADS)?.remove(id)?;
            tx.open_table(UPLOAD_TIMES)?.remove(id)?;
            if let Some((repo, digest, size)) = blob {
                link(&tx, repo, digest, size, now)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn uploads(&self) -> Result<Vec<String>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(UPLOADS)?;
        let mut out = Vec::new();
        for row in t.range::<&str>(..)? {
            out.push(row?.0.value().to_string());
        }
        Ok(out)
    }
}
