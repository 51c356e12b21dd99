//! Blob storage: content-addressed bytes shared by every repository.
//!
//! The registry reaches storage only through [`BlobStore`], as CNCF
//! distribution reaches its drivers, so an object-store backend can follow
//! the filesystem one. Which repository may see which blob is metadata
//! (`meta`), not storage: each blob is stored once.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use sealvol_spec::Sha256Digest;
use std::os::unix::fs::FileExt;

use tokio::io::{AsyncRead, AsyncWriteExt};

/// Ranges up to this size are read into memory rather than mapped.
const MAP_THRESHOLD: u64 = 1 << 20;

/// A stream of blob bytes.
pub type BlobReader = Pin<Box<dyn AsyncRead + Send>>;

/// Blob bytes ready to send: whole (in memory or mapped), or as a stream.
pub enum BlobBody {
    Bytes(Bytes),
    Stream(BlobReader),
}

#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// The blob's size, `None` when it is not stored.
    async fn size(&self, digest: &Sha256Digest) -> io::Result<Option<u64>>;
    /// `len` bytes of the blob from `offset`; `None` when it is not stored.
    async fn body(
        &self,
        digest: &Sha256Digest,
        offset: u64,
        len: u64,
    ) -> io::Result<Option<BlobBody>>;
    /// The whole blob in memory (for manifests, which are small).
    async fn get(&self, digest: &Sha256Digest) -> io::Result<Option<Bytes>>;
    /// Stores a local file whose bytes hash to `digest` (the caller has
    /// checked), consuming it. Storing a blob that exists is a no-op.
    async fn ingest(&self, digest: &Sha256Digest, file: &Path) -> io::Result<()>;
    /// Stores bytes that hash to `digest`.
    async fn put(&self, digest: &Sha256Digest, bytes: Bytes) -> io::Result<()>;
    async fn delete(&self, digest: &Sha256Digest) -> io::Result<()>;
    /// Every stored blob (for garbage collection).
    async fn list(&self) -> io::Result<Vec<StoredBlob>>;
}

/// A stored blob as garbage collection sees it.
#[derive(Clone, Debug)]
pub struct StoredBlob {
    pub digest: Sha256Digest,
    pub size: u64,
    /// When its bytes were stored, Unix seconds.
    pub modified: u64,
}

/// Blobs as files: `<root>/blobs/sha256/<2 hex>/<64 hex>`. A blob appears
/// under its name only by an atomic rename of a complete, fsynced file
/// from `<root>/tmp`, so a crash never leaves a partial blob.
pub struct FsBlobStore {
    root: PathBuf,
}

impl FsBlobStore {
    pub fn open(root: &Path) -> io::Result<FsBlobStore> {
        std::fs::create_dir_all(root.join("blobs/sha256"))?;
        std::fs::create_dir_all(root.join("tmp"))?;
        // Leftovers of writes interrupted by a crash are never renamed into
        // place; clear them.
        for e in std::fs::read_dir(root.join("tmp"))? {
            let _ = std::fs::remove_file(e?.path());
        }
        Ok(FsBlobStore {
            root: root.to_path_buf(),
        })
    }

    fn path(&self, d: &Sha256Digest) -> PathBuf {
        let hex = d.hex();
        self.root.join("blobs/sha256").join(&hex[..2]).join(hex)
    }

    /// The folder where files are staged before they are renamed into place.
    pub fn staging(&self) -> PathBuf {
        self.root.join("tmp")
    }

    async fn place(&self, digest: &Sha256Digest, file: &Path) -> io::Result<()> {
        let dest = self.path(digest);
        if tokio::fs::try_exists(&dest).await? {
            tokio::fs::remove_file(file).await?;
            return Ok(());
        }
        let dir = dest.parent().expect("blob paths have a parent");
        tokio::fs::create_dir_all(dir).await?;
        tokio::fs::rename(file, &dest).await?;
        // Make the rename itself durable.
        tokio::fs::File::open(dir).await?.sync_all().await
    }
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn size(&self, digest: &Sha256Digest) -> io::Result<Option<u64>> {
        match tokio::fs::metadata(self.path(digest)).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Small ranges are read; larger ones are mapped, so the bytes go from
    /// the page cache to the socket with no copy in between and no thread
    /// hand-off per chunk. Mapping is safe because a blob file never
    /// changes: it appears by rename and goes by unlink, which leaves a
    /// mapping valid. (Only a failing disk could fault a mapped read.)
    async fn body(
        &self,
        digest: &Sha256Digest,
        offset: u64,
        len: u64,
    ) -> io::Result<Option<BlobBody>> {
        let path = self.path(digest);
        tokio::task::spawn_blocking(move || {
            let f = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            if len <= MAP_THRESHOLD {
                let mut buf = vec![0u8; len as usize];
                f.read_exact_at(&mut buf, offset)?;
                return Ok(Some(BlobBody::Bytes(Bytes::from(buf))));
            }
            // SAFETY: blob files are immutable (see above).
            let map = unsafe {
                memmap2::MmapOptions::new()
                    .offset(offset)
                    .len(len as usize)
                    .map(&f)?
            };
            let _ = map.advise(memmap2::Advice::Sequential);
            let _ = map.advise(memmap2::Advice::WillNeed);
            Ok(Some(BlobBody::Bytes(Bytes::from_owner(map))))
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn get(&self, digest: &Sha256Digest) -> io::Result<Option<Bytes>> {
        match tokio::fs::read(self.path(digest)).await {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn ingest(&self, digest: &Sha256Digest, file: &Path) -> io::Result<()> {
        tokio::fs::File::open(file).await?.sync_all().await?;
        self.place(digest, file).await
    }

    async fn put(&self, digest: &Sha256Digest, bytes: Bytes) -> io::Result<()> {
        if self.size(digest).await?.is_some() {
            return Ok(());
        }
        let tmp = self.staging().join(uuid::Uuid::new_v4().to_string());
        let mut f = tokio::fs::File::create(&tmp).await?;
        f.write_all(&bytes).await?;
        f.sync_all().await?;
        drop(f);
        self.place(digest, &tmp).await
    }

    async fn delete(&self, digest: &Sha256Digest) -> io::Result<()> {
        match tokio::fs::remove_file(self.path(digest)).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    async fn list(&self) -> io::Result<Vec<StoredBlob>> {
        let root = self.root.join("blobs/sha256");
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for shard in std::fs::read_dir(&root)? {
                let shard = shard?;
                if !shard.file_type()?.is_dir() {
                    continue;
                }
                for e in std::fs::read_dir(shard.path())? {
                    let e = e?;
                    // Anything that is not a digest-named file is not a blob.
                    let Some(digest) = e
                        .file_name()
                        .to_str()
                        .and_then(|n| format!("sha256:{n}").parse::<Sha256Digest>().ok())
                    else {
                        continue;
                    };
                    let m = e.metadata()?;
                    let modified = m
                        .modified()?
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    out.push(StoredBlob {
                        digest,
                        size: m.len(),
                        modified,
                    });
                }
            }
            Ok(out)
        })
        .await
        .map_err(io::Error::other)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_read_range_and_dedupe() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsBlobStore::open(dir.path()).unwrap();
        let data = Bytes::from_static(b"hello blob store");
        let d = Sha256Digest::of(&data);
        assert_eq!(store.size(&d).await.unwrap(), None);
        store.put(&d, data.clone()).await.unwrap();
        store.put(&d, data.clone()).await.unwrap();
        assert_eq!(store.size(&d).await.unwrap(), Some(16));
        let Some(BlobBody::Bytes(b)) = store.body(&d, 6, 4).await.unwrap() else {
            panic!("a stored blob has a body");
        };
        assert_eq!(b.as_ref(), b"blob");
        // Large ranges are mapped; the bytes are the same.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let bd = Sha256Digest::of(&big);
        store.put(&bd, Bytes::from(big.clone())).await.unwrap();
        let Some(BlobBody::Bytes(b)) = store.body(&bd, 5000, 2_000_000).await.unwrap() else {
            panic!("a stored blob has a body");
        };
        assert_eq!(b.as_ref(), &big[5000..2_005_000]);
        // A staged copy of an existing blob is consumed, not duplicated.
        let staged = store.staging().join("x");
        std::fs::write(&staged, &data).unwrap();
        store.ingest(&d, &staged).await.unwrap();
        assert!(!staged.exists());
        let listed: Vec<Sha256Digest> = store
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.digest)
            .collect();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&d) && listed.contains(&bd));
        store.delete(&d).await.unwrap();
        assert_eq!(store.get(&d).await.unwrap(), None);
    }
}
