//! The OCI view's rows (the distribution spec's repositories, blob links,
//! manifests, tags and referrers): what `/v2` reads and writes, each
//! operation one transaction. A manifest that is a version's index is
//! sealed into its volume in the same transaction (`volumes`).

use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::WriteTransaction;
use crate::store::meta::error::{MetaError, Result};
use crate::store::meta::schema::{
    key, prefix, BLOB_LINKS, LINK_TIMES, MANIFESTS, REFERRERS, REPOS, TAGS,
};
use crate::store::meta::volumes;
use serde::{Deserialize, Serialize};

/// What the registry keeps about a manifest (its bytes are a blob).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestRecord {
    pub media_type: String,
    pub size: u64,
    /// Descriptor of this manifest as listed by the referrers API, when it
    /// has a `subject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// When it was last stored (Unix seconds); 0 for records older than
    /// the field. Garbage collection spares manifests younger than its
    /// grace period, such as the shards a push stores before its index.
    #[serde(default)]
    pub stored_at: u64,
}

/// What a manifest PUT needs to exist in the repository first.
#[derive(Debug, Default)]
pub struct References {
    pub blobs: Vec<String>,
    pub children: Vec<String>,
}

/// Makes `digest` visible in `repo`, recording the repository if new.
pub(crate) fn link(
    tx: &WriteTransaction,
    repo: &str,
    digest: &str,
    size: u64,
    now: u64,
) -> Result<()> {
    let k = key(&[repo, digest]);
    tx.open_table(BLOB_LINKS)?.insert(k.as_str(), size)?;
    tx.open_table(LINK_TIMES)?.insert(k.as_str(), now)?;
    ensure_repo(tx, repo, now)
}

fn ensure_repo(tx: &WriteTransaction, repo: &str, now: u64) -> Result<()> {
    let mut repos = tx.open_table(REPOS)?;
    if repos.get(repo)?.is_none() {
        repos.insert(repo, now)?;
    }
    Ok(())
}

/// Removes a manifest's row and its referrer rows (not its tags), and
/// returns the record it had.
pub(crate) fn drop_manifest(
    tx: &WriteTransaction,
    repo: &str,
    digest: &str,
) -> Result<Option<ManifestRecord>> {
    let record: Option<ManifestRecord> = {
        let mut manifests = tx.open_table(MANIFESTS)?;
        let removed = manifests.remove(key(&[repo, digest]).as_str())?;
        match removed {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        }
    };
    if record.as_ref().is_some_and(|r| r.subject.is_some()) {
        // The subject digest is inside the descriptor; find the row by suffix.
        let mut refs = tx.open_table(REFERRERS)?;
        let (lo, hi) = prefix(&[repo]);
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
    Ok(record)
}

impl MetaStore {
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

    /// Makes every `(digest, size)` visible in `repo`, in one transaction.
    pub fn link_blobs(&self, repo: &str, blobs: &[(String, u64)], now: u64) -> Result<()> {
        let tx = self.db.begin_write()?;
        for (digest, size) in blobs {
            link(&tx, repo, digest, *size, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The size of `digest` if `repo` may see it.
    pub fn blob_size(&self, repo: &str, digest: &str) -> Result<Option<u64>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(BLOB_LINKS)?;
        Ok(t.get(key(&[repo, digest]).as_str())?.map(|v| v.value()))
    }

    /// The size and link time of link `repo NUL digest` (`key`).
    pub fn link(&self, k: &str) -> Result<Option<(u64, u64)>> {
        let tx = self.db.begin_read()?;
        let Some(size) = tx.open_table(BLOB_LINKS)?.get(k)?.map(|v| v.value()) else {
            return Ok(None);
        };
        let at = tx.open_table(LINK_TIMES)?.get(k)?.map_or(0, |v| v.value());
        Ok(Some((size, at)))
    }

    /// Renews the time of each link in `keys` that still exists to `now`,
    /// in one transaction; answers which exist.
    pub fn renew_links(&self, keys: &[String], now: u64) -> Result<Vec<bool>> {
        let tx = self.db.begin_write()?;
        let mut out = Vec::with_capacity(keys.len());
        {
            let links = tx.open_table(BLOB_LINKS)?;
            let mut times = tx.open_table(LINK_TIMES)?;
            for k in keys {
                let linked = links.get(k)?.is_some();
                if linked && times.get(k)?.is_none_or(|t| t.value() < now) {
                    times.insert(k, now)?;
                }
                out.push(linked);
            }
        }
        tx.commit()?;
        Ok(out)
    }

    pub fn unlink_blob(&self, repo: &str, digest: &str) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let k = key(&[repo, digest]);
        let removed = tx.open_table(BLOB_LINKS)?.remove(k.as_str())?.is_some();
        tx.open_table(LINK_TIMES)?.remove(k.as_str())?;
        tx.commit()?;
        Ok(removed)
    }

    /// Records a manifest after checking, in the same transaction, that
    /// everything it references is in the repository (so no concurrent
    /// delete can slip in between); optionally seals it as a version of the
    /// volume (SPEC.md §7.1), tags it, and indexes it as a referrer of
    /// `subject` (digest, descriptor JSON). Answers `Err(what)` naming the
    /// first missing reference instead.
    #[allow(clippy::too_many_arguments)]
    pub fn put_manifest(
        &self,
        repo: &str,
        digest: &str,
        record: &ManifestRecord,
        refs: &References,
        tag: Option<&str>,
        subject: Option<&str>,
        version: Option<&volumes::Sealed>,
        now: u64,
    ) -> Result<std::result::Result<(), String>> {
        let tx = self.db.begin_write()?;
        {
            let links = tx.open_table(BLOB_LINKS)?;
            if let Some(b) = refs
                .blobs
                .iter()
                .find(|b| !matches!(links.get(key(&[repo, b]).as_str()), Ok(Some(_))))
            {
                return Ok(Err(format!("blob {b}")));
            }
            let manifests = tx.open_table(MANIFESTS)?;
            if let Some(c) = refs
                .children
                .iter()
                .find(|c| !matches!(manifests.get(key(&[repo, c]).as_str()), Ok(Some(_))))
            {
                return Ok(Err(format!("manifest {c}")));
            }
        }
        {
            let bytes = serde_json::to_vec(record)?;
            tx.open_table(MANIFESTS)?
                .insert(key(&[repo, digest]).as_str(), bytes.as_slice())?;
            if let (Some(s), Some(desc)) = (subject, &record.subject) {
                tx.open_table(REFERRERS)?
                    .insert(key(&[repo, s, digest]).as_str(), desc.as_bytes())?;
            }
            ensure_repo(&tx, repo, now)?;
            // A tag names the version: its current index, which may not be
            // this one (SPEC.md §7.1: no downgrade).
            let target = match version {
                Some(v) => volumes::seal(&tx, repo, digest, v, now)?,
                None => digest.to_string(),
            };
            if let Some(t) = tag {
                volumes::put_tag(&tx, repo, t, &target, None, now)?;
            }
        }
        tx.commit()?;
        Ok(Ok(()))
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
    /// entries; the index of a version is tombstoned instead, so it can be
    /// restored (SPEC.md §7.1). Returns false when it did not exist.
    pub fn delete_manifest(&self, repo: &str, digest: &str, now: u64) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let existed;
        {
            if tx
                .open_table(MANIFESTS)?
                .get(key(&[repo, digest]).as_str())?
                .is_none()
            {
                return Ok(false);
            }
            if let Some(version) = volumes::version_of_index(&tx, repo, digest)? {
                // Hides every index of the version, this one included.
                volumes::tombstone(&tx, repo, &version, now)
                    .map_err(|e| MetaError(e.to_string()))?;
                existed = true;
            } else {
                existed = drop_manifest(&tx, repo, digest)?.is_some();
                volumes::drop_tags_of(&tx, repo, &[digest.to_string()], now)?;
            }
        }
        tx.commit()?;
        Ok(existed)
    }

    /// Removes a tag (not what it points at).
    pub fn delete_tag(&self, repo: &str, tag: &str, now: u64) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let removed = volumes::remove_tag(&tx, repo, tag, now)?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_paginate_in_order_and_manifest_delete_drops_its_tags() {
        let (_dir, m) = MetaStore::temporary();
        let rec = ManifestRecord {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            size: 10,
            subject: None,
            stored_at: 0,
        };
        let none = References::default();
        for t in ["b", "a", "c"] {
            m.put_manifest("ns/repo", "sha256:aa", &rec, &none, Some(t), None, None, 0)
                .unwrap()
                .unwrap();
        }
        m.put_manifest(
            "ns/repo2",
            "sha256:bb",
            &rec,
            &none,
            Some("z"),
            None,
            None,
            0,
        )
        .unwrap()
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
        assert!(m.delete_manifest("ns/repo", "sha256:aa", 0).unwrap());
        assert_eq!(m.tags("ns/repo", None, 10).unwrap().0, Vec::<String>::new());
        assert_eq!(
            m.resolve_tag("ns/repo2", "z").unwrap().as_deref(),
            Some("sha256:bb")
        );
    }
}
