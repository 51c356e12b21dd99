//! Blobs and upload data as files under the registry's data folder: the
//! embedded default.

use std::io;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt as _;
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};
use std::io::Write as _;
use std::os::unix::fs::FileExt;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt};

use super::{AppendError, Appended, BlobBody, BlobStore, BodyStream, StoredBlob};

/// Ranges up to this size are read into memory rather than mapped.
const MAP_THRESHOLD: u64 = 1 << 20;

/// Blobs as files: `<root>/blobs/sha256/<2 hex>/<64 hex>`. A blob appears
/// under its name only by an atomic rename of a complete, fsynced file
/// from `<root>/tmp` or `<root>/uploads`, so a crash never leaves a
/// partial blob. An upload session's data is the file `<root>/uploads/<id>`.
pub struct FsBlobStore {
    root: PathBuf,
}

impl FsBlobStore {
    pub fn open(root: &Path) -> io::Result<FsBlobStore> {
        std::fs::create_dir_all(root.join("blobs/sha256"))?;
        std::fs::create_dir_all(root.join("tmp"))?;
        std::fs::create_dir_all(root.join("uploads"))?;
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

    /// The data file of upload session `id`.
    pub fn upload_path(&self, id: &str) -> PathBuf {
        self.root.join("uploads").join(id)
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

    async fn create_upload(&self, id: &str) -> io::Result<()> {
        tokio::fs::File::create(self.upload_path(id))
            .await
            .map(drop)
    }

    async fn append_upload(
        &self,
        id: &str,
        offset: u64,
        body: BodyStream,
        hasher: Option<Sha256>,
    ) -> Appended {
        let path = self.upload_path(id);
        let (written, hasher) = write_stream(&path, offset, body, hasher).await;
        // Whatever reached the file counts, even if the body broke off.
        match tokio::fs::metadata(&path).await {
            Ok(m) => Appended {
                size: m.len(),
                // A hasher that missed bytes is dropped; the file is hashed
                // again at the end.
                hasher: hasher.filter(|_| written.is_ok()),
                result: written,
            },
            Err(e) => Appended {
                size: offset,
                hasher: None,
                result: Err(e.into()),
            },
        }
    }

    async fn upload_size(&self, id: &str) -> io::Result<Option<u64>> {
        match tokio::fs::metadata(self.upload_path(id)).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn hash_upload(&self, id: &str) -> io::Result<Sha256Digest> {
        let mut f = tokio::fs::File::open(self.upload_path(id)).await?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(Sha256Digest(h.finalize().into()))
    }

    async fn commit_upload(&self, id: &str, digest: &Sha256Digest) -> io::Result<()> {
        let file = self.upload_path(id);
        tokio::fs::File::open(&file).await?.sync_all().await?;
        self.place(digest, &file).await
    }

    async fn remove_upload(&self, id: &str) -> io::Result<()> {
        match tokio::fs::remove_file(self.upload_path(id)).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    async fn uploads(&self) -> io::Result<Vec<(String, u64)>> {
        let dir = self.root.join("uploads");
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for e in std::fs::read_dir(dir)? {
                let e = e?;
                let modified = e
                    .metadata()?
                    .modified()?
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                if let Some(name) = e.file_name().to_str() {
                    out.push((name.to_string(), modified));
                }
            }
            Ok(out)
        })
        .await
        .map_err(io::Error::other)?
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

/// Appends a request body to the file at `path`, which must hold `offset`
/// bytes, hashing as it goes.
///
/// A blocking thread does the writing and hashing with large buffered
/// writes while this task receives the body, so the network, the hash and
/// the disk overlap. Returns how it ended and the hasher; on error the
/// bytes that reached the file stay there.
async fn write_stream(
    path: &Path,
    offset: u64,
    mut body: BodyStream,
    hasher: Option<Sha256>,
) -> (Result<(), AppendError>, Option<Sha256>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let path = path.to_path_buf();
    let writer = tokio::task::spawn_blocking(move || {
        let mut hasher = hasher;
        let result = (|| {
            let f = std::fs::OpenOptions::new().append(true).open(&path)?;
            if f.metadata()?.len() != offset {
                return Err(io::Error::other(format!(
                    "upload data holds {} bytes, the session {offset}",
                    f.metadata()?.len()
                )));
            }
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            while let Some(chunk) = rx.blocking_recv() {
                if let Some(h) = hasher.as_mut() {
                    h.update(&chunk);
                }
                w.write_all(&chunk)?;
            }
            w.flush()
        })();
        (result, hasher)
    });
    let mut body_error = None;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => {
                if tx.send(c).await.is_err() {
                    break; // the writer failed; its error is reported below
                }
            }
            Err(e) => {
                body_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let (written, hasher) = match writer.await {
        Ok(r) => r,
        Err(e) => return (Err(io::Error::other(e).into()), None),
    };
    match (body_error, written) {
        (Some(e), _) => (Err(e.into()), None),
        (None, Err(e)) => (Err(e.into()), None),
        (None, Ok(())) => (Ok(()), hasher),
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
        // Upload data of an existing blob is consumed, not duplicated.
        store.create_upload("x").await.unwrap();
        let body = futures_util::stream::iter([Ok(data.clone())]).boxed();
        let a = store.append_upload("x", 0, body, None).await;
        assert!(a.result.is_ok() && a.size == 16);
        store.commit_upload("x", &d).await.unwrap();
        assert_eq!(store.upload_size("x").await.unwrap(), None);
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
