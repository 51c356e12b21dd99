//! `dir:///PATH`: a folder on the registry's host.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use async_trait::async_trait;
use futures_util::{StreamExt, TryStreamExt};
use tokio_util::io::ReaderStream;

use crate::source::tree_path;
use crate::{ByteStream, ErrorKind, Object, Source, SourceOptions, SyncError};

/// Reads in 1 MiB buffers: few wake-ups, little memory per object.
const READ_BUFFER: usize = 1 << 20;

pub struct DirSource {
    uri: String,
    root: PathBuf,
}

impl DirSource {
    pub fn new(uri: &str, _opts: &SourceOptions) -> Result<DirSource, SyncError> {
        let path = uri.strip_prefix("dir://").unwrap_or(uri);
        if !path.starts_with('/') {
            return Err(SyncError::new(
                ErrorKind::InvalidSource,
                format!("{uri}: a dir:// source is an absolute path on the registry's host: dir:///PATH"),
            ));
        }
        Ok(DirSource {
            uri: uri.to_string(),
            root: PathBuf::from(path),
        })
    }

    fn io(&self, what: &str, e: std::io::Error) -> SyncError {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::Denied,
            _ => ErrorKind::Internal,
        };
        SyncError::new(kind, format!("{}: {what}: {e}", self.uri))
    }
}

/// The file's content version: size and modification time.
fn stamp(m: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}.{}", m.mtime(), m.mtime_nsec())
}

#[async_trait]
impl Source for DirSource {
    fn uri(&self) -> &str {
        &self.uri
    }

    async fn list(&self) -> Result<Vec<Object>, SyncError> {
        let root = self.root.clone();
        let meta = std::fs::metadata(&root).map_err(|e| self.io("cannot read the folder", e))?;
        if !meta.is_dir() {
            return Err(SyncError::new(
                ErrorKind::InvalidSource,
                format!("{}: not a folder", self.uri),
            ));
        }
        let mut out = Vec::new();
        // Symlinks and special files are skipped: a version copies what the
        // folder holds, not what it points at.
        for e in walkdir::WalkDir::new(&root)
            .min_depth(1)
            .sort_by_file_name()
        {
            let e = e.map_err(|e| {
                let io = e
                    .into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("walk failed"));
                self.io("cannot walk the folder", io)
            })?;
            if !e.file_type().is_file() {
                continue;
            }
            let m = e.metadata().map_err(|e| {
                self.io(
                    "cannot stat",
                    e.into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("stat failed")),
                )
            })?;
            let rel = e.path().strip_prefix(&root).expect("walked under root");
            let key = e.path().display().to_string();
            let rel = rel.to_str().ok_or_else(|| {
                SyncError::new(
                    ErrorKind::InvalidSource,
                    format!("{}: {key} is not UTF-8", self.uri),
                )
            })?;
            out.push(Object {
                path: tree_path(&self.uri, &key, rel)?,
                key,
                size: m.len(),
                checksum: None,
                version: Some(stamp(&m)),
                mode: m.permissions().mode() & sealvol_spec::tree::MAX_MODE,
            });
        }
        Ok(out)
    }

    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError> {
        let file = tokio::fs::File::open(&object.key).await.map_err(|e| {
            SyncError::new(
                ErrorKind::Changed,
                format!("{}: {}: {e}", self.uri, object.key),
            )
        })?;
        let m = file.metadata().await.map_err(|e| self.io(&object.key, e))?;
        if Some(stamp(&m)) != object.version || m.len() != object.size {
            return Err(SyncError::new(
                ErrorKind::Changed,
                format!("{}: {} changed after it was listed", self.uri, object.key),
            ));
        }
        let uri = self.uri.clone();
        let key = object.key.clone();
        Ok(ReaderStream::with_capacity(file, READ_BUFFER)
            .map_err(move |e| SyncError::new(ErrorKind::Internal, format!("{uri}: {key}: {e}")))
            .boxed())
    }
}
