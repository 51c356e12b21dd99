//! Registry metadata in redb: repositories, which blobs each repository
//! may see, manifests, tags, the referrers index and upload sessions.
//! Every change is one transaction, so a crash leaves either all of it or
//! none of it.
//!
//! Keys join their parts with NUL, which no repository name, tag or digest
//! contains, so a repository's rows form one contiguous key range.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const REPOS: TableDefinition<&str, u64> = TableDefinition::new("repos");
const BLOB_LINKS: TableDefinition<&str, u64> = TableDefinition::new("blob_links");
const MANIFESTS: TableDefinition<&str, &[u8]> = TableDefinition::new("manifests");
const TAGS: TableDefinition<&str, &str> = TableDefinition::new("tags");
const REFERRERS: TableDefinition<&str, &[u8]> = TableDefinition::new("referrers");
const UPLOADS: TableDefinition<&str, &str> = TableDefinition::new("uploads");

#[derive(Debug, thiserror::Error)]
#[error("metadata store: {0}")]
pub struct MetaError(String);

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self {
                MetaError(e.to_string())
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    serde_json::Error
);

pub type Result<T> = std::result::Result<T, MetaError>;

/// What the registry keeps about a manifest (its bytes are a blob).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestRecord {
    pub media_type: String,
    pub size: u64,
    /// Descriptor of this manifest as listed by the referrers API, when it
    /// has a `subject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

fn key(parts: &[&str]) -> String {
    parts.join("\0")
}

/// The key range of every row whose key starts with `parts` + NUL.
fn prefix(parts: &[&str]) -> (String, String) {
    let p = key(parts);
    (format!("{p}\0"), format!("{p}\x01"))
}

pub struct MetaStore {
    db: Database,
}

/// Makes `digest` visible in `repo`, recording the repository if new.
fn link(tx: &redb::WriteTransaction, repo: &str, digest: &str, size: u64, now: u64) -> Result<()> {
    tx.open_table(BLOB_LINKS)?
        .insert(key(&[repo, digest]).as_str(), size)?;
    ensure_repo(tx, repo, now)
}

fn ensure_repo(tx: &redb::WriteTransaction, repo: &str, now: u64) -> Result<()> {
    let mut repos = tx.open_table(REPOS)?;
    if repos.get(repo)?.is_none() {
        repos.insert(repo, now)?;
    }
    Ok(())
}

impl MetaStore {
    pub fn open(path: &Path) -> Result<MetaStore> {
        let db = Database::create(path)?;
        // Create every table once so that readers never see a missing one.
        let tx = db.begin_write()?;
        tx.open_table(REPOS)?;
        tx.open_table(BLOB_LINKS)?;
        tx.open_table(MANIFESTS)?;
        tx.open_table(TAGS)?;
        tx.open_table(REFERRERS)?;
        tx.open_table(UPLOADS)?;
        tx.commit()?;
        Ok(MetaStore { db })
    }

    pub fn repo_exists(&self, repo: &str) -> Result<bool> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(REPOS)?.get(repo)?.is_some())
    }

    /// Makes `digest` visible in `repo`.
    pub fn link_blob(&self, repo: &str, digest: &str, size: u64, now: u64) -> Result<()> {
        let tx = self.db.begin_write()?;
        link(&tx, repo, digest, size, now)?;
        tx.commit()?;
        Ok(())
    }

    /// The size of `digest` if `repo` may see it.
    pub fn blob_size(&self, repo: &str, digest: &str) -> Result<Option<u64>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(BLOB_LINKS)?;
        Ok(t.get(key(&[repo, digest]).as_str())?.map(|v| v.value()))
    }

    pub fn unlink_blob(&self, repo: &str, digest: &str) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let removed = tx
            .open_table(BLOB_LINKS)?
            .remove(key(&[repo, digest]).as_str())?
            .is_some();
        tx.commit()?;
        Ok(removed)
    }

    /// Records a manifest, optionally tags it, and indexes it as a
    /// referrer of `subject` (digest, descriptor JSON), in one transaction.
    pub fn put_manifest(
        &self,
        repo: &str,
        digest: &str,
        record: &ManifestRecord,
        tag: Option<&str>,
        subject: Option<&str>,
        now: u64,
    ) -> Result<()> {
        let tx = self.db.begin_write()?;
        {
            let bytes = serde_json::to_vec(record)?;
            tx.open_table(MANIFESTS)?
                .insert(key(&[repo, digest]).as_str(), bytes.as_slice())?;
            if let Some(t) = tag {
                tx.open_table(TAGS)?
                    .insert(key(&[repo, t]).as_str(), digest)?;
            }
            if let (Some(s), Some(desc)) = (subject, &record.subject) {
                tx.open_table(REFERRERS)?
                    .insert(key(&[repo, s, digest]).as_str(), desc.as_bytes())?;
            }
            ensure_repo(&tx, repo, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn manifest(&self, repo: &str, digest: &str) -> Result<Option<ManifestRecord>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(MANIFESTS)?;
        match t.get(key(&[repo, digest]).as_str())? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn resolve_tag(&self, repo: &str, tag: &str) -> Result<Option<String>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TAGS)?;
        Ok(t.get(key(&[repo, tag]).as_str())?
            .map(|v| v.value().to_string()))
    }

    /// Deletes a manifest with the tags that point at it and its referrer
    /// entries. Returns false when it did not exist.
    pub fn delete_manifest(&self, repo: &str, digest: &str) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let existed;
        {
            let subject = {
                let mut manifests = tx.open_table(MANIFESTS)?;
                let removed = manifests.remove(key(&[repo, digest]).as_str())?;
                existed = removed.is_some();
                match removed {
                    Some(v) => serde_json::from_slice::<ManifestRecord>(v.value())?.subject,
                    None => None,
                }
            };
            let mut tags = tx.open_table(TAGS)?;
            let (lo, hi) = prefix(&[repo]);
            let stale: Vec<String> = tags
                .range(lo.as_str()..hi.as_str())?
                .filter_map(|r| r.ok())
                .filter(|(_, v)| v.value() == digest)
                .map(|(k, _)| k.value().to_string())
                .collect();
            for k in stale {
                tags.remove(k.as_str())?;
            }
            if subject.is_some() {
                // The subject digest is inside the descriptor; find the row by suffix.
                let mut refs = tx.open_table(REFERRERS)?;
                let suffix = format!("\0{digest}");
                let rows: Vec<String> = refs
                    .range(lo.as_str()..hi.as_str())?
                    .filter_map(|r| r.ok())
                    .map(|(k, _)| k.value().to_string())
                    .filter(|k| k.ends_with(&suffix))
                    .collect();
                for k in rows {
                    refs.remove(k.as_str())?;
                }
            }
        }
        tx.commit()?;
        Ok(existed)
    }

    pub fn delete_tag(&self, repo: &str, tag: &str) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let removed = tx
            .open_table(TAGS)?
            .remove(key(&[repo, tag]).as_str())?
            .is_some();
        tx.commit()?;
        Ok(removed)
    }

    /// Tags of `repo` in lexical order after `last`, at most `n`, and
    /// whether more follow.
    pub fn tags(&self, repo: &str, last: Option<&str>, n: usize) -> Result<(Vec<String>, bool)> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TAGS)?;
        let (lo, hi) = prefix(&[repo]);
        let start = match last {
            Some(l) => format!("{}\x01", key(&[repo, l])),
            None => lo,
        };
        let strip = repo.len() + 1;
        let mut out = Vec::new();
        for row in t.range(start.as_str()..hi.as_str())? {
            let (k, _) = row?;
            if out.len() == n {
                return Ok((out, true));
            }
            out.push(k.value()[strip..].to_string());
        }
        Ok((out, false))
    }

    /// Repository names in lexical order after `last`, at most `n`.
    pub fn catalog(&self, last: Option<&str>, n: usize) -> Result<(Vec<String>, bool)> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REPOS)?;
        let mut out = Vec::new();
        let iter = match last {
            Some(l) => t.range(format!("{l}\0").as_str()..)?,
            None => t.range::<&str>(..)?,
        };
        for row in iter {
            let (k, _) = row?;
            if out.len() == n {
                return Ok((out, true));
            }
            out.push(k.value().to_string());
        }
        Ok((out, false))
    }

    /// Descriptor JSON of every manifest in `repo` whose subject is `subject`.
    pub fn referrers(&self, repo: &str, subject: &str) -> Result<Vec<String>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REFERRERS)?;
        let (lo, hi) = prefix(&[repo, subject]);
        let mut out = Vec::new();
        for row in t.range(lo.as_str()..hi.as_str())? {
            let (_, v) = row?;
            out.push(String::from_utf8_lossy(v.value()).into_owned());
        }
        Ok(out)
    }

    pub fn put_upload(&self, id: &str, repo: &str) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(UPLOADS)?.insert(id, repo)?;
        tx.commit()?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_paginate_in_order_and_manifest_delete_drops_its_tags() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let rec = ManifestRecord {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            size: 10,
            subject: None,
        };
        for t in ["b", "a", "c"] {
            m.put_manifest("ns/repo", "sha256:aa", &rec, Some(t), None, 0)
                .unwrap();
        }
        m.put_manifest("ns/repo2", "sha256:bb", &rec, Some("z"), None, 0)
            .unwrap();
        assert_eq!(
            m.tags("ns/repo", None, 2).unwrap(),
            (vec!["a".into(), "b".into()], true)
        );
        assert_eq!(
            m.tags("ns/repo", Some("b"), 2).unwrap(),
            (vec!["c".into()], false)
        );
        assert_eq!(m.catalog(None, 10).unwrap().0, ["ns/repo", "ns/repo2"]);
        assert_eq!(m.catalog(Some("ns/repo"), 10).unwrap().0, ["ns/repo2"]);
        assert!(m.delete_manifest("ns/repo", "sha256:aa").unwrap());
        assert_eq!(m.tags("ns/repo", None, 10).unwrap().0, Vec::<String>::new());
        assert_eq!(
            m.resolve_tag("ns/repo2", "z").unwrap().as_deref(),
            Some("sha256:bb")
        );
    }
}
