//! `dir:///PATH`: a folder on the registry's host, its regular files with
//! their permission bits.
//!
//! Not a way to reach another machine's files (the path is on the
//! registry's host), and not a copy of symlinks or special files: those
//! are skipped.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
}

/// What an I/O error on the folder means for the job.
fn io_error(uri: &str, what: &str, e: std::io::Error) -> SyncError {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::NotFound,
        std::io::ErrorKind::PermissionDenied => ErrorKind::Denied,
        _ => ErrorKind::Internal,
    };
    SyncError::new(kind, format!("{uri}: {what}: {e}"))
}

/// Every regular file under `root`, in path order. Blocking: a walk of a
/// large folder is many `stat`s.
fn walk(uri: &str, root: &Path) -> Result<Vec<Object>, SyncError> {
    let meta = std::fs::metadata(root).map_err(|e| io_error(uri, "cannot read the folder", e))?;
    if !meta.is_dir() {
        return Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: not a folder"),
        ));
    }
    let walk_error = |what: &str, e: walkdir::Error| {
        let io = e
            .into_io_error()
            .unwrap_or_else(|| std::io::Error::other(format!("{what} failed")));
        io_error(uri, what, io)
    };
    let mut out = Vec::new();
    // Symlinks and special files are skipped: a version copies what the
    // folder holds, not what it points at.
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.map_err(|e| walk_error("cannot walk the folder", e))?;
        if !e.file_type().is_file() {
            continue;
        }
        let m = e.metadata().map_err(|e| walk_error("cannot stat", e))?;
        let rel = e.path().strip_prefix(root).expect("walked under root");
        let key = e.path().display().to_string();
        let rel = rel.to_str().ok_or_else(|| {
            SyncError::new(
                ErrorKind::InvalidSource,
                format!("{uri}: {key} is not UTF-8"),
            )
        })?;
        out.push(Object {
            path: tree_path(uri, &key, rel)?,
            key,
            size: m.len(),
            checksum: None,
            mismatch_hint: None,
            version: Some(stamp(&m)),
            identity: identity(&m, std::time::SystemTime::now()),
            mode: m.permissions().mode() & sealvol_spec::tree::MAX_MODE,
        });
    }
    Ok(out)
}

/// A file changed this close before it was listed may change again within
/// the same timestamp tick, its stamp unchanged: `push`'s racy rule.
const RACY_NS: i128 = 100_000_000;

/// The file's identity across jobs (SPEC.md §8.5): device, inode, size,
/// and modification and change times in nanoseconds. A write changes the
/// times, and a file replaced by another has another inode or change time;
/// `None` for a file changed within [`RACY_NS`] of `listed`.
fn identity(m: &std::fs::Metadata, listed: std::time::SystemTime) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    let (mtime, ctime) = (ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()));
    let now = listed
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    (now - mtime.max(ctime) >= RACY_NS)
        .then(|| format!("file:{}:{}:{}:{mtime}:{ctime}", m.dev(), m.ino(), m.len()))
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
        let (uri, root) = (self.uri.clone(), self.root.clone());
        tokio::task::spawn_blocking(move || walk(&uri, &root))
            .await
            .map_err(|e| {
                SyncError::new(
                    ErrorKind::Internal,
                    format!("{}: listing the folder failed: {e}", self.uri),
                )
            })?
    }

    /// Identities name device and inode numbers: unique on this host.
    fn reuse_scope(&self) -> Option<String> {
        Some("dir".into())
    }

    async fn open(&self, object: &Object) -> Result<ByteStream, SyncError> {
        let file = tokio::fs::File::open(&object.key)
            .await
            .map_err(|e| match e.kind() {
                // The registry may not read what it could list.
                std::io::ErrorKind::PermissionDenied => io_error(&self.uri, &object.key, e),
                // Listed a moment ago: gone or replaced since.
                _ => SyncError::new(
                    ErrorKind::Changed,
                    format!("{}: {}: {e}", self.uri, object.key),
                ),
            })?;
        let m = file
            .metadata()
            .await
            .map_err(|e| io_error(&self.uri, &object.key, e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn source(root: &Path) -> DirSource {
        DirSource::new(
            &format!("dir://{}", root.display()),
            &SourceOptions::default(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn lists_regular_files_and_notices_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/x.bin"), b"xyz").unwrap();
        std::fs::write(dir.path().join("top"), b"").unwrap();
        std::os::unix::fs::symlink("top", dir.path().join("link")).unwrap();
        let src = source(dir.path());
        let listed = src.list().await.unwrap();
        let paths: Vec<&str> = listed.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(paths, ["a/b/x.bin", "top"]);
        assert_eq!(listed[0].size, 3);

        std::fs::remove_file(dir.path().join("a/b/x.bin")).unwrap();
        let e = src.open(&listed[0]).await.err().unwrap();
        assert_eq!(e.kind, ErrorKind::Changed, "{}", e.message);

        let e = source(&dir.path().join("missing"))
            .list()
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
        let e = source(&dir.path().join("top")).list().await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidSource, "{}", e.message);
    }

    #[tokio::test]
    async fn an_unreadable_file_is_denied_not_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.bin");
        std::fs::write(&path, b"data").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::File::open(&path).is_ok() {
            // Root reads anything: nothing to check here.
            return;
        }
        let src = source(dir.path());
        let listed = src.list().await.unwrap();
        let e = src.open(&listed[0]).await.err().unwrap();
        assert_eq!(e.kind, ErrorKind::Denied, "{}", e.message);
    }

    #[test]
    fn a_file_is_named_by_its_stamp_unless_it_changed_just_before_the_listing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.bin");
        std::fs::write(&path, b"weights").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        let changed = m.modified().unwrap();
        let ms = std::time::Duration::from_millis;
        assert_eq!(
            identity(&m, changed + ms(50)),
            None,
            "racy: changed 50 ms before"
        );
        let id = identity(&m, changed + ms(500)).expect("an identity");
        assert!(id.starts_with("file:") && id.contains(":7:"), "{id}");
        // A write a timestamp tick later changes it, however little it
        // changes (within one tick is the racy case above).
        std::thread::sleep(ms(20));
        std::fs::write(&path, b"weightz").unwrap();
        let later = std::fs::metadata(&path).unwrap();
        let id2 = identity(&later, later.modified().unwrap() + ms(500));
        assert!(id2.is_some() && id2 != Some(id), "{id2:?}");
    }
}
