//! The local chunk cache: content-addressed files under
//! `<cache dir>/chunks/sha256/<2 hex>/<64 hex>`, shared by every pull (and
//! later every mount) of every version, so a chunk crosses the network once
//! per machine. A chunk is written to a temporary file and renamed into
//! place, so readers never see a partial one. A read checks its length and
//! sha256 ([`ChunkCache::get`]), or only its length for readers that check
//! every byte they serve through the chain of SPEC.md §2.5
//! ([`ChunkCache::get_unverified`]); either way a damaged file is refetched
//! rather than served. Such readers also store what they download without
//! hashing it, so an entry may hold other bytes than its name says (a
//! forging mirror); they drop an entry their chain rejects
//! ([`ChunkCache::drop_rejected`]) and fetch it again checked by sha256.
//!
//! A cache may be bounded ([`ChunkCache::open_bounded`]): every read
//! refreshes a chunk file's modification time, so the oldest times are the
//! least recently used chunks, and a write that takes the cache over its
//! bound removes those until it is back under. The order lives in the files
//! themselves, so it survives restarts and is shared by every process using
//! the cache.
//!
//! The cache also remembers which repositories of a registry were seen
//! holding a chunk, so a push to a new volume can ask the registry to mount
//! the chunk from one of them instead of uploading it.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sealvol_spec::tree::ChunkRef;
use sealvol_spec::Sha256Digest;

#[derive(Clone, Debug)]
pub struct ChunkCache {
    root: PathBuf,
    /// The size bound, when there is one; shared by clones.
    budget: Option<Arc<Budget>>,
}

/// The bookkeeping of a bounded cache: how many bytes it holds, as far as
/// this process knows (recounted from the files at each eviction, since
/// other processes add chunks too).
#[derive(Debug)]
struct Budget {
    max: u64,
    used: AtomicU64,
    /// One eviction at a time.
    evicting: Mutex<()>,
}

/// What an eviction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    pub chunks: u64,
    pub bytes: u64,
    /// Bytes the cache holds afterwards.
    pub kept: u64,
}

impl ChunkCache {
    /// Opens (creating) the cache under `dir`, with no size bound.
    pub fn open(dir: &Path) -> std::io::Result<ChunkCache> {
        let root = dir.join("chunks");
        std::fs::create_dir_all(root.join("tmp"))?;
        std::fs::create_dir_all(root.join("sha256"))?;
        std::fs::create_dir_all(root.join("refs"))?;
        Ok(ChunkCache { root, budget: None })
    }

    /// Opens (creating) the cache under `dir`, holding at most `max_bytes`
    /// of chunks: when a new chunk takes it over, the least recently used
    /// chunks are removed until it holds at most 90% of the bound. A cache
    /// already over the bound (a pull is unbounded) is trimmed now.
    pub fn open_bounded(dir: &Path, max_bytes: u64) -> std::io::Result<ChunkCache> {
        let mut cache = ChunkCache::open(dir)?;
        let used = cache.scan()?.iter().map(|f| f.len).sum();
        cache.budget = Some(Arc::new(Budget {
            max: max_bytes,
            used: AtomicU64::new(used),
            evicting: Mutex::new(()),
        }));
        if used > max_bytes {
            cache.evict_to(max_bytes / 10 * 9)?;
        }
        Ok(cache)
    }

    /// The size bound, if any.
    pub fn max_bytes(&self) -> Option<u64> {
        self.budget.as_ref().map(|b| b.max)
    }

    /// Bytes of chunks the cache holds now (counted from its files).
    pub fn size(&self) -> std::io::Result<u64> {
        Ok(self.scan()?.iter().map(|f| f.len).sum())
    }

    /// Removes the least recently used chunks until the cache holds at most
    /// `target` bytes.
    pub fn evict_to(&self, target: u64) -> std::io::Result<Evicted> {
        let mut files = self.scan()?;
        let mut kept: u64 = files.iter().map(|f| f.len).sum();
        // Oldest use first; the path breaks ties so the order is stable.
        files.sort_by(|a, b| a.used.cmp(&b.used).then_with(|| a.path.cmp(&b.path)));
        let mut out = Evicted::default();
        for f in files {
            if kept <= target {
                break;
            }
            match std::fs::remove_file(&f.path) {
                Ok(()) => {
                    kept -= f.len;
                    out.chunks += 1;
                    out.bytes += f.len;
                }
                // Another process removed it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => kept -= f.len,
                Err(e) => return Err(e),
            }
        }
        out.kept = kept;
        if let Some(b) = &self.budget {
            b.used.store(kept, Ordering::Relaxed);
        }
        if out.chunks > 0 {
            tracing::debug!(
                chunks = out.chunks,
                bytes = out.bytes,
                kept,
                "evicted least recently used chunks"
            );
        }
        Ok(out)
    }

    /// Every chunk file, and whole-file copy earlier builds kept (`files`:
    /// evicted like chunks), with its size and last use.
    fn scan(&self) -> std::io::Result<Vec<CachedFile>> {
        let mut out = Vec::new();
        for kind in ["sha256", "files"] {
            let dir = self.root.join(kind);
            if dir.is_dir() {
                self.scan_into(&dir, &mut out)?;
            }
        }
        Ok(out)
    }

    fn scan_into(&self, dir: &Path, out: &mut Vec<CachedFile>) -> std::io::Result<()> {
        for shard in std::fs::read_dir(dir)? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            let entries = match std::fs::read_dir(shard.path()) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                if meta.is_file() {
                    out.push(CachedFile {
                        path: entry.path(),
                        len: meta.len(),
                        used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    });
                }
            }
        }
        Ok(())
    }

    /// After `bytes` more were stored: evicts when over the bound.
    fn account(&self, bytes: u64) {
        let Some(b) = &self.budget else {
            return;
        };
        let used = b.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if used <= b.max {
            return;
        }
        // One eviction at a time, each counting the files again. Waiting
        // (puts run on blocking threads) rather than skipping keeps the
        // bound: the eviction before this one may have counted the files
        // before this chunk landed.
        let _guard = b.evicting.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = self.evict_to(b.max / 10 * 9) {
            tracing::warn!(cache = %self.root.display(), error = %e, "could not evict chunks");
        }
    }

    fn path(&self, digest: &Sha256Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join("sha256").join(&hex[..2]).join(hex)
    }

    fn ref_path(&self, digest: &Sha256Digest) -> PathBuf {
        let hex = digest.hex();
        self.root.join("refs").join(&hex[..2]).join(hex)
    }

    /// Records that the chunks of `file` (a file a pull has just finished,
    /// holding `chunks` at their offsets) can be read from it: a pull
    /// writes each byte once, into its destination, and the cache points
    /// there instead of keeping a second copy. A reference holds while the
    /// file keeps its device, inode, size and modification time; every
    /// read through it is checked like a cached copy (by sha256, or by the
    /// caller's chain), so a file changed since serves nothing wrong. They
    /// take no room, so they do not count against a bound.
    pub fn put_refs(&self, file: &Path, chunks: &[ChunkRef]) {
        let result = (|| -> std::io::Result<()> {
            let file = file.canonicalize()?;
            let stamp = FileRef::stamp_of(&file)?;
            for c in chunks {
                if self.path(&c.sha256).is_file() {
                    continue;
                }
                let r = FileRef {
                    path: file.clone(),
                    offset: c.offset,
                    ..stamp.clone()
                };
                let path = self.ref_path(&c.sha256);
                std::fs::create_dir_all(path.parent().expect("ref path has a parent"))?;
                let mut tmp = tempfile::NamedTempFile::new_in(self.root.join("tmp"))?;
                tmp.write_all(&serde_json::to_vec(&r).map_err(std::io::Error::other)?)?;
                tmp.persist(&path).map_err(|e| e.error)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::debug!(file = %file.display(), error = %e, "chunks not referenced in the cache");
        }
    }

    /// The chunk's bytes through a reference, when the file it points to
    /// is unchanged; a stale reference is removed.
    fn get_referenced(&self, chunk: &ChunkRef) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt as _;
        let path = self.ref_path(&chunk.sha256);
        let text = std::fs::read(&path).ok()?;
        let read = || -> Option<Vec<u8>> {
            let r: FileRef = serde_json::from_slice(&text).ok()?;
            let file = std::fs::File::open(&r.path).ok()?;
            if FileRef::stamp(&file.metadata().ok()?) != (r.dev, r.ino, r.size, r.mtime_ns) {
                return None;
            }
            let mut bytes = vec![0; chunk.length as usize];
            file.read_exact_at(&mut bytes, r.offset).ok()?;
            Some(bytes)
        };
        let bytes = read();
        if bytes.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        bytes
    }

    /// The chunk's bytes when the cache holds an intact copy: right length
    /// and sha256. A damaged copy is removed and reported as absent. A hit
    /// counts as a use for the LRU order.
    pub fn get(&self, chunk: &ChunkRef) -> Option<Vec<u8>> {
        let bytes = self.get_unverified(chunk)?;
        if Sha256Digest::of(&bytes) == chunk.sha256 {
            return Some(bytes);
        }
        self.remove_damaged(&chunk.sha256);
        None
    }

    /// The chunk's bytes when the cache holds a copy of the right length,
    /// without hashing them: for readers that check what they serve through
    /// the chain (SPEC.md §2.5) and call [`ChunkCache::get`] or
    /// [`ChunkCache::remove_damaged`] when that check fails.
    pub fn get_unverified(&self, chunk: &ChunkRef) -> Option<Vec<u8>> {
        let path = self.path(&chunk.sha256);
        let Ok(mut file) = std::fs::File::open(&path) else {
            return self.get_referenced(chunk);
        };
        let mut bytes = crate::buffers::take(chunk.length as usize + 1);
        std::io::Read::by_ref(&mut file)
            .take(u64::from(chunk.length) + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        if bytes.len() != chunk.length as usize {
            self.remove_damaged(&chunk.sha256);
            return None;
        }
        // Best effort: a cache shared read-only still serves.
        let _ = file.set_modified(SystemTime::now());
        Some(bytes)
    }

    /// Removes a copy found damaged, so that the next read fetches it again.
    pub fn remove_damaged(&self, digest: &Sha256Digest) {
        let path = self.path(digest);
        tracing::warn!(path = %path.display(), "damaged cache entry removed");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(self.ref_path(digest));
    }

    /// Drops the entry of a chunk whose bytes the chain rejected (SPEC.md
    /// §2.5), before the caller fetches it again checked by sha256. Not
    /// [`ChunkCache::remove_damaged`]: the bytes may be damaged, stored by
    /// a reader of another version through a forging mirror, or right under
    /// a forged chunk list, and which one only the fetch tells.
    pub fn drop_rejected(&self, digest: &Sha256Digest) {
        tracing::debug!(chunk = %digest, "cache entry dropped after the chain rejected its bytes");
        let _ = std::fs::remove_file(self.path(digest));
        let _ = std::fs::remove_file(self.ref_path(digest));
    }

    /// Whether the cache holds the chunk, or a reference to it (without
    /// checking its bytes).
    pub fn contains(&self, digest: &Sha256Digest) -> bool {
        self.path(digest).is_file() || self.ref_path(digest).is_file()
    }

    /// Stores a chunk's bytes: checked by sha256, or (a reader that checks
    /// through the chain, SPEC.md §2.5) unchecked, which is why every read
    /// of a cached chunk is checked again by one or the other. Failure to
    /// cache is not an error for the caller, who has the bytes, so it is
    /// only logged.
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
        self.account(bytes.len() as u64);
        Ok(())
    }
}

/// Where a chunk is in a pulled file, and the file as it was then.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct FileRef {
    path: PathBuf,
    offset: u64,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileRef {
    fn stamp(meta: &std::fs::Metadata) -> (u64, u64, u64, i128) {
        use std::os::unix::fs::MetadataExt as _;
        (
            meta.dev(),
            meta.ino(),
            meta.len(),
            i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        )
    }

    fn stamp_of(path: &Path) -> std::io::Result<FileRef> {
        let (dev, ino, size, mtime_ns) = FileRef::stamp(&std::fs::metadata(path)?);
        Ok(FileRef {
            path: path.to_path_buf(),
            offset: 0,
            dev,
            ino,
            size,
            mtime_ns,
        })
    }
}

struct CachedFile {
    path: PathBuf,
    len: u64,
    used: SystemTime,
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
        }
    }

    #[test]
    fn a_pulled_file_serves_its_chunks_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::open(&dir.path().join("cache")).unwrap();
        let file = dir.path().join("model.bin");
        std::fs::write(&file, b"first chunk|second chunk").unwrap();
        let first = chunk(b"first chunk|");
        let second = ChunkRef {
            offset: 12,
            ..chunk(b"second chunk")
        };
        cache.put_refs(&file, &[first, second]);
        assert!(cache.contains(&second.sha256));
        assert_eq!(cache.get(&second).unwrap(), b"second chunk");
        assert_eq!(cache.get(&first).unwrap(), b"first chunk|");
        assert_eq!(cache.size().unwrap(), 0, "references take no room");
        // Rewritten (another inode, or another time or size): not served,
        // and the reference goes.
        std::fs::write(&file, b"first chunk|second chunK").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
        let _ = std::fs::File::options()
            .append(true)
            .open(&file)
            .unwrap()
            .set_modified(SystemTime::now());
        assert!(cache.get(&second).is_none(), "a changed file served");
        assert!(!cache.contains(&second.sha256));
        // Changed in place with the same stamp: the sha256 check refuses it.
        std::fs::write(&file, b"first chunk|second chunk").unwrap();
        cache.put_refs(&file, &[second]);
        let stamp = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, b"first chunk|second chunK").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&file)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        assert!(cache.get(&second).is_none(), "changed bytes served");
        std::fs::remove_file(&file).unwrap();
        assert!(cache.get(&first).is_none(), "a removed file served");
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
        // Same length: only the sha256 check sees it; the unverified read
        // leaves it to the caller's chain check.
        assert_eq!(cache.get_unverified(&c).unwrap(), b"hello chunK");
        assert!(cache.get(&c).is_none(), "damaged entry served");
        assert!(!cache.contains(&c.sha256), "damaged entry kept");
        // Wrong length: refused either way, and removed.
        cache.put(&c.sha256, b"hello");
        assert!(cache.get_unverified(&c).is_none());
        assert!(!cache.contains(&c.sha256));
    }

    /// Sets a chunk file's last use to `secs` after the epoch.
    fn age(cache: &ChunkCache, c: &ChunkRef, secs: u64) {
        let f = std::fs::File::options()
            .write(true)
            .open(cache.path(&c.sha256))
            .unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn a_bounded_cache_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::open_bounded(dir.path(), 1000).unwrap();
        assert_eq!(cache.max_bytes(), Some(1000));
        let data: Vec<Vec<u8>> = (0u8..4).map(|i| vec![i; 300]).collect();
        let chunks: Vec<ChunkRef> = data.iter().map(|d| chunk(d)).collect();
        for (i, (c, d)) in chunks.iter().zip(&data).take(3).enumerate() {
            cache.put(&c.sha256, d);
            age(&cache, c, 1000 + i as u64);
        }
        assert_eq!(cache.size().unwrap(), 900);
        // A read makes chunk 0 the most recently used.
        assert!(cache.get(&chunks[0]).is_some());
        // 1200 bytes > 1000: down to at most 900 by dropping the oldest use,
        // chunk 1 (chunk 3 was just written, chunk 0 just read).
        cache.put(&chunks[3].sha256, &data[3]);
        assert!(
            cache.contains(&chunks[0].sha256),
            "recently read chunk evicted"
        );
        assert!(
            !cache.contains(&chunks[1].sha256),
            "least recently used chunk kept"
        );
        assert!(cache.contains(&chunks[2].sha256));
        assert!(
            cache.contains(&chunks[3].sha256),
            "the new chunk was evicted"
        );
        assert_eq!(cache.size().unwrap(), 900);
    }

    #[test]
    fn a_bound_applies_to_what_is_already_there_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let unbounded = ChunkCache::open(dir.path()).unwrap();
        let data: Vec<Vec<u8>> = (0u8..5).map(|i| vec![i; 100]).collect();
        let chunks: Vec<ChunkRef> = data.iter().map(|d| chunk(d)).collect();
        for (i, (c, d)) in chunks.iter().zip(&data).enumerate() {
            unbounded.put(&c.sha256, d);
            age(&unbounded, c, 2000 - i as u64);
        }
        assert_eq!(unbounded.size().unwrap(), 500);
        // Opening with a bound of 300 trims to 270: the two oldest uses go
        // first (chunks 4 and 3), then chunk 2 to get under 90%.
        let bounded = ChunkCache::open_bounded(dir.path(), 300).unwrap();
        assert_eq!(bounded.size().unwrap(), 200);
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(bounded.contains(&c.sha256), i < 2, "chunk {i}");
        }
        let report = bounded.evict_to(0).unwrap();
        assert_eq!(
            report,
            Evicted {
                chunks: 2,
                bytes: 200,
                kept: 0
            }
        );
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
