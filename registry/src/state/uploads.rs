//! Upload sessions in memory: each one's lock, length and running hash,
//! over its data in the blob store ([`BlobStore::append_upload`]). What
//! survives a restart is the session's row (`store::meta::uploads`) and
//! its data; the running hash does not, and the data is read back and
//! hashed once more when the upload completes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt, TryStreamExt as _};
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};

use crate::error::{Code, RegistryError, Result};
use crate::store::{AppendError, BlobStore, BodyError};

/// The in-memory state of one session; its lock orders the writes.
pub struct Session {
    pub size: u64,
    /// The hash of bytes `0..size`, when every byte went through this process.
    hasher: Option<Sha256>,
    /// Ended by expiry while a request waited for this lock.
    pub(crate) expired: bool,
}

/// How long upload data without a session must have been idle before a
/// starting registry clears it.
pub const ORPHAN_AGE_SECONDS: u64 = 3600;

pub struct Uploads {
    blobs: Arc<dyn BlobStore>,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
}

fn expired(id: &str) -> RegistryError {
    RegistryError::new(
        Code::BlobUploadUnknown,
        format!("upload {id} expired; start the upload again"),
    )
}

/// Ends the sessions nobody wrote to for the upload TTL; returns how many.
impl Uploads {
    /// Upload sessions with their data in `blobs`; clears data that no
    /// session owns (`live` lists the sessions the metadata store knows).
    /// In a store replicas share, only data nobody wrote to for
    /// [`ORPHAN_AGE_SECONDS`] goes: another replica may be writing a
    /// one-request upload, which has no session row.
    pub async fn open(
        blobs: Arc<dyn BlobStore>,
        live: &[String],
        now: u64,
    ) -> std::io::Result<Uploads> {
        let min_age = if blobs.shared() {
            ORPHAN_AGE_SECONDS
        } else {
            0
        };
        for (id, modified) in blobs.uploads().await? {
            if !live.contains(&id) && modified.saturating_add(min_age) <= now {
                let _ = blobs.remove_upload(&id).await;
            }
        }
        Ok(Uploads {
            blobs,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// Creates the data of a new session.
    pub async fn create(&self) -> Result<String> {
        let id = uuid::Uuid::new_v4().to_string();
        self.blobs.create_upload(&id).await?;
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

    /// The session `id`, loading it from its data after a restart. The
    /// caller has checked that the metadata store knows it.
    pub async fn session(&self, id: &str) -> Result<Arc<tokio::sync::Mutex<Session>>> {
        if let Some(s) = self.sessions.lock().expect("sessions lock").get(id) {
            return Ok(Arc::clone(s));
        }
        let Some(size) = self.blobs.upload_size(id).await? else {
            return Err(RegistryError::new(
                Code::BlobUploadUnknown,
                "upload session has no data",
            ));
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
        S: Stream<Item = std::result::Result<bytes::Bytes, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        if session.expired {
            return Err(expired(id));
        }
        self.refresh(id, session).await?;
        if let Some(start) = start {
            if start != session.size {
                return Err(RegistryError::with_status(
                    Code::BlobUploadInvalid,
                    ::http::StatusCode::RANGE_NOT_SATISFIABLE,
                    format!(
                        "chunk starts at {start}, the upload has {} bytes",
                        session.size
                    ),
                ));
            }
        }
        let body = body.map_err(|e| BodyError(e.to_string())).boxed();
        let appended = (self.blobs)
            .append_upload(id, session.size, body, session.hasher.take())
            .await;
        // Whatever was stored counts, even if the body broke off, so the
        // client can resume from what the status reports.
        session.size = appended.size;
        session.hasher = appended.hasher;
        appended.result.map_err(append_error)?;
        Ok(session.size)
    }

    /// Takes the session's size from its stored data: another replica
    /// sharing the store may have appended since this one last did (a
    /// load balancer need not be sticky). The running hash is then stale
    /// and dropped; the data is hashed again at the end.
    pub async fn refresh(&self, id: &str, session: &mut Session) -> Result<()> {
        match self.blobs.upload_size(id).await? {
            Some(stored) if stored != session.size => {
                session.size = stored;
                session.hasher = None;
            }
            Some(_) => {}
            None => {
                return Err(RegistryError::new(
                    Code::BlobUploadUnknown,
                    format!("upload {id} has no data; start the upload again"),
                ))
            }
        }
        Ok(())
    }

    /// The digest of everything uploaded so far.
    pub async fn digest(&self, id: &str, session: &mut Session) -> Result<Sha256Digest> {
        if let Some(h) = session.hasher.take() {
            return Ok(Sha256Digest(h.finalize().into()));
        }
        Ok(self.blobs.hash_upload(id).await?)
    }

    /// Makes the session's data blob `digest` (checked by the caller).
    pub async fn commit(&self, id: &str, digest: &Sha256Digest) -> Result<()> {
        Ok(self.blobs.commit_upload(id, digest).await?)
    }

    /// The lock of session `id` if no request holds it: `Some(None)` when
    /// this process has no state for it, `None` when it is busy.
    #[allow(clippy::option_option)]
    pub(crate) fn idle(&self, id: &str) -> Option<Option<tokio::sync::OwnedMutexGuard<Session>>> {
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

    /// Forgets a session and removes its data if it is still there.
    pub async fn remove(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(id);
        if let Err(e) = self.blobs.remove_upload(id).await {
            tracing::warn!(upload = id, error = %e, "could not remove upload data");
        }
    }
}

/// A body that broke off is the client's error; the store's is ours.
fn append_error(e: AppendError) -> RegistryError {
    match e {
        AppendError::Body(e) => RegistryError::new(Code::BlobUploadInvalid, e.to_string()),
        AppendError::Store(e) => e.into(),
    }
}
