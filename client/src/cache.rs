//! The local chunk cache: content-addressed files under
//! `<cache dir>/chunks/sha256/<2 hex>/<64 hex>`, shared by every pull (and
//! later every mount) of every version, so a chunk crosses the network once
//! per machine. A chunk is written to a temporary file and renamed into
//! place, so readers never see a partial one, and its BLAKE3 is checked
//! again on every read, so a damaged cache file is refetched rather than
//! served.
//!
//! The cache also remembers which repositories of a registry were seen
//! holding a chunk, so a push to a new volume can ask the registry to mount
//! the chunk from one of them instead of uploading it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sealvol_spec::tree::ChunkRef;
use sealvol_spec::{B3Digest, Sha256Digest};

#[derive(Clone, Debug)]
pub struct ChunkCache {
    root: PathBuf,
}

impl ChunkCache {
    /// Opens (creating) the cache under `dir`.
    pub fn open(dir: &Path) -> std::io::Result<ChunkCache> {
        let root = dir.join("chunks");
        std::fs::create_dir_all(root.join("tmp"))?;
        std::fs::create_dir_all(root.join("sha256"))?;
        Ok(ChunkCache { root })
    }

    fn path(&self, digest: &Sha256Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join("sha256").join(&hex[..2]).join(hex)
    }

    /// The chunk's bytes when the cache holds an intact copy. A copy whose
    /// length or BLAKE3 is wrong is removed and reported as absent.
    pub fn get(&self, chunk: &ChunkRef) -> Option<Vec<u8>> {
        let path = self.path(&chunk.sha256);
        let bytes = std::fs::read(&path).ok()?;
        if bytes.len() == chunk.length as usize && B3Digest::of(&bytes) == chunk.blake3 {
            Some(bytes)
        } else {
            tracing::warn!(path = %path.display(), "damaged cache entry removed");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Whether the cache holds the chunk (without checking its bytes).
    pub fn contains(&self, digest: &Sha256Digest) -> bool {
        self.path(digest).is_file()
    }

    /// Stores verified chunk bytes. Failure to cache is not an error for the
    /// caller, who has the bytes, so it is only logged.
    pub fn put(&self, digest: &Sha256Digest, bytes: &[u8]) {
        if let Err(e) = self.try_put(digest, bytes) {
            tracing::warn!(chunk = %digest, error = %e, "could not cache chunk");
        }
    }

    fn try_put(&self, digest: &Sha256Digest, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.path(digest);
        if path.is_file() {
            return Ok(());
        }
        std::fs::create_dir_all(path.parent().expect("cache path has a parent"))?;
        let mut tmp = tempfile::NamedTempFile::new_in(self.root.join("tmp"))?;
        tmp.write_all(bytes)?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Where chunks were seen on a registry: `<cache dir>/seen/<registry>/<2
/// hex>/<64 hex>` holds the names of repositories known to have the blob,
/// one per line. Plain files keep concurrent sealvol processes out of each
/// other's way without a database lock.
#[derive(Clone, Debug)]
pub struct SeenBlobs {
    root: PathBuf,
}

impl SeenBlobs {
    pub fn open(dir: &Path, registry: &str) -> std::io::Result<SeenBlobs> {
        let safe: String = registry
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let root = dir.join("seen").join(safe);
        std::fs::create_dir_all(&root)?;
        Ok(SeenBlobs { root })
    }

    fn path(&self, digest: &Sha256Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join(&hex[..2]).join(hex)
    }

    /// Repositories that held the blob when it was last seen, newest first.
    pub fn repos(&self, digest: &Sha256Digest) -> Vec<String> {
        let text = std::fs::read_to_string(self.path(digest)).unwrap_or_default();
        text.lines().rev().map(str::to_string).collect()
    }

    /// Records that `repo` holds the blob.
    pub fn record(&self, digest: &Sha256Digest, repo: &str) {
        if self.repos(digest).iter().any(|r| r == repo) {
            return;
        }
        let path = self.path(digest);
        let result = std::fs::create_dir_all(path.parent().expect("has a parent")).and_then(|()| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            // One short append per line is atomic for concurrent writers.
            f.write_all(format!("{repo}\n").as_bytes())
        });
        if let Err(e) = result {
            tracing::debug!(error = %e, "could not record a seen blob");
        }
    }

    /// Forgets that `repo` holds the blob (the registry said it does not).
    pub fn forget(&self, digest: &Sha256Digest, repo: &str) {
        let keep: Vec<String> = self
            .repos(digest)
            .into_iter()
            .rev()
            .filter(|r| r != repo)
            .collect();
        let path = self.path(digest);
        let _ = if keep.is_empty() {
            std::fs::remove_file(&path)
        } else {
            std::fs::write(&path, keep.join("\n") + "\n")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &[u8]) -> ChunkRef {
        ChunkRef {
            offset: 0,
            length: data.len() as u32,
            sha256: Sha256Digest::of(data),
            blake3: B3Digest::of(data),
        }
    }

    #[test]
    fn put_get_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::open(dir.path()).unwrap();
        let c = chunk(b"hello chunk");
        assert!(cache.get(&c).is_none());
        cache.put(&c.sha256, b"hello chunk");
        assert_eq!(cache.get(&c).unwrap(), b"hello chunk");
        std::fs::write(cache.path(&c.sha256), b"hello chunK").unwrap();
        assert!(cache.get(&c).is_none(), "damaged entry served");
        assert!(!cache.contains(&c.sha256), "damaged entry kept");
    }

    #[test]
    fn seen_blobs_record_and_forget() {
        let dir = tempfile::tempdir().unwrap();
        let seen = SeenBlobs::open(dir.path(), "127.0.0.1:5000").unwrap();
        let d = Sha256Digest::of(b"x");
        assert!(seen.repos(&d).is_empty());
        seen.record(&d, "a/b");
        seen.record(&d, "c/d");
        seen.record(&d, "a/b");
        assert_eq!(seen.repos(&d), vec!["c/d", "a/b"]);
        seen.forget(&d, "c/d");
        assert_eq!(seen.repos(&d), vec!["a/b"]);
        seen.forget(&d, "a/b");
        assert!(seen.repos(&d).is_empty());
    }
}
