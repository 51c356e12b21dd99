//! Blob upload sessions: data files under `<root>/uploads`, their
//! repositories in the metadata store, so a session survives a restart.
//!
//! The SHA-256 of a session is computed while its bytes stream in; after a
//! restart the running hash is gone and the file is hashed once more when
//! the upload completes.
//!
//! A session nobody writes to for the upload TTL is abandoned ([`expire`],
//! run by every garbage collection pass and on its own timer): its row,
//! its data file and its in-memory state go, and garbage collection stops
//! sparing its repository for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt};
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};
use std::io::Write as _;

use tokio::io::AsyncReadExt;

use crate::error::{Code, RegistryError, Result};

/// The in-memory state of one session; its lock orders the writes.
pub struct Session {
    pub size: u64,
    /// The hash of bytes `0..size`, when every byte went through this process.
    hasher: Option<Sha256>,
    /// Ended by expiry while a request waited for this lock.
    pub(crate) expired: bool,
}

pub struct Uploads {
    dir: PathBuf,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
}

/// Appends a request body to the file at `path`, hashing as it goes.
///
/// A blocking thread does the writing and hashing with large buffered
/// writes while this task receives the body, so the network, the hash and
/// the disk overlap. Returns the bytes written and the hasher; on error the
/// bytes that reached the file stay there.
pub async fn write_stream<S, E>(
    path: &Path,
    mut body: S,
    hasher: Option<Sha256>,
) -> (Result<u64>, Option<Sha256>)
where
    S: Stream<Item = std::result::Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(16);
    let path = path.to_path_buf();
    let writer = tokio::task::spawn_blocking(move || {
        let mut hasher = hasher;
        let result = (|| {
            let f = std::fs::OpenOptions::new().append(true).open(&path)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            let mut n = 0u64;
            while let Some(chunk) = rx.blocking_recv() {
                if let Some(h) = hasher.as_mut() {
                    h.update(&chunk);
                }
                w.write_all(&chunk)?;
                n += chunk.len() as u64;
            }
            w.flush()?;
            Ok::<u64, std::io::Error>(n)
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
                body_error = Some(RegistryError::new(
                    Code::BlobUploadInvalid,
                    format!("reading the request body: {e}"),
                ));
                break;
            }
        }
    }
    drop(tx);
    let (written, hasher) = match writer.await {
        Ok(r) => r,
        Err(e) => return (Err(RegistryError::internal(e)), None),
    };
    match (body_error, written) {
        (Some(e), _) => (Err(e), None),
        (None, Err(e)) => (Err(e.into()), None),
        (None, Ok(n)) => (Ok(n), hasher),
    }
}

fn expired(id: &str) -> RegistryError {
    RegistryError::new(
        Code::BlobUploadUnknown,
        format!("upload {id} expired; start the upload again"),
    )
}

/// Ends the sessions nobody wrote to for the upload TTL; returns how many.
/// A session a request is writing to is never ended under it.
pub async fn expire(app: &crate::app::App) -> Result<u64> {
    let (now, ttl) = (app.now(), app.policy.upload_ttl_seconds);
    let stale = app.meta(move |m| m.stale_uploads(now, ttl)).await?;
    let mut ended = 0;
    for id in stale {
        let Some(guard) = app.uploads.idle(&id) else {
            continue;
        };
        let i = id.clone();
        if app.meta(move |m| m.end_stale_upload(&i, now, ttl)).await? {
            // A request waiting for this lock finds the session gone.
            if let Some(mut g) = guard {
                g.expired = true;
            }
            app.uploads.remove(&id).await;
            ended += 1;
        }
    }
    if ended > 0 {
        tracing::info!(sessions = ended, "expired abandoned upload sessions");
    }
    Ok(ended)
}

/// Records a write to session `id`, which restarts its TTL.
pub async fn touch(app: &crate::app::App, id: &str) -> Result<()> {
    let (i, now) = (id.to_string(), app.now());
    app.meta(move |m| m.touch_upload(&i, now)).await
}

/// Starts a session of `repo`: its data file, its in-memory state and
/// its row (with the time, which upload expiry counts from).
pub async fn start(app: &crate::app::App, repo: &str) -> Result<String> {
    let id = app.uploads.create().await?;
    let (i, repo, now) = (id.clone(), repo.to_string(), app.now());
    app.meta(move |m| m.put_upload(&i, &repo, now)).await?;
    Ok(id)
}

impl Uploads {
    /// Opens the upload folder and forgets data files that have no session
    /// (`live` lists the sessions the metadata store knows).
    pub fn open(root: &Path, live: &[String]) -> std::io::Result<Uploads> {
        let dir = root.join("uploads");
        std::fs::create_dir_all(&dir)?;
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            if !live.iter().any(|id| e.file_name() == id.as_str()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        Ok(Uploads {
            dir,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Creates the data file of a new session.
    pub async fn create(&self) -> Result<String> {
        let id = uuid::Uuid::new_v4().to_string();
        tokio::fs::File::create(self.path(&id)).await?;
        self.sessions.lock().expect("sessions lock").insert(
            id.clone(),
            Arc::new(tokio::sync::Mutex::new(Session {
                size: 0,
                hasher: Some(Sha256::new()),
                expired: false,
            })),
        );
        Ok(id)
    }

    /// The session `id`, loading it from its data file after a restart.
    /// The caller has checked that the metadata store knows it.
    pub async fn session(&self, id: &str) -> Result<Arc<tokio::sync::Mutex<Session>>> {
        if let Some(s) = self.sessions.lock().expect("sessions lock").get(id) {
            return Ok(Arc::clone(s));
        }
        let size = match tokio::fs::metadata(self.path(id)).await {
            Ok(m) => m.len(),
            Err(_) => {
                return Err(RegistryError::new(
                    Code::BlobUploadUnknown,
                    "upload session has no data",
                ))
            }
        };
        let s = Arc::new(tokio::sync::Mutex::new(Session {
            size,
            hasher: None,
            expired: false,
        }));
        Ok(Arc::clone(
            self.sessions
                .lock()
                .expect("sessions lock")
                .entry(id.to_string())
                .or_insert(s),
        ))
    }

    /// Appends `body` at `start` (which must be the session's size).
    pub async fn append<S, E>(
        &self,
        id: &str,
        session: &mut Session,
        start: Option<u64>,
        body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if session.expired {
            return Err(expired(id));
        }
        if let Some(start) = start {
            if start != session.size {
                return Err(RegistryError::with_status(
                    Code::BlobUploadInvalid,
                    axum::http::StatusCode::RANGE_NOT_SATISFIABLE,
                    format!(
                        "chunk starts at {start}, the upload has {} bytes",
                        session.size
                    ),
                ));
            }
        }
        let path = self.path(id);
        let (written, hasher) = write_stream(&path, body, session.hasher.take()).await;
        // Whatever reached the file counts, even if the body broke off, so
        // the client can resume from what the status reports. A hasher that
        // missed bytes is dropped; the file is hashed again at the end.
        session.size = tokio::fs::metadata(&path).await?.len();
        session.hasher = hasher;
        written?;
        Ok(session.size)
    }

    /// The digest of everything uploaded so far.
    pub async fn digest(&self, id: &str, session: &mut Session) -> Result<Sha256Digest> {
        if let Some(h) = session.hasher.take() {
            return Ok(Sha256Digest(h.finalize().into()));
        }
        let mut f = tokio::fs::File::open(self.path(id)).await?;
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

    /// The lock of session `id` if no request holds it: `Some(None)` when
    /// this process has no state for it, `None` when it is busy.
    #[allow(clippy::option_option)]
    fn idle(&self, id: &str) -> Option<Option<tokio::sync::OwnedMutexGuard<Session>>> {
        let sessions = self.sessions.lock().expect("sessions lock");
        match sessions.get(id) {
            None => Some(None),
            Some(s) => Arc::clone(s).try_lock_owned().ok().map(Some),
        }
    }

    /// Whether this process holds state for session `id` (tests).
    #[cfg(test)]
    pub(crate) fn is_loaded(&self, id: &str) -> bool {
        self.sessions
            .lock()
            .expect("sessions lock")
            .contains_key(id)
    }

    /// Forgets a session and removes its data file if it is still there.
    pub async fn remove(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(id);
        let _ = tokio::fs::remove_file(self.path(id)).await;
    }
}
