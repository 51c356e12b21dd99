//! Blob upload sessions: their data in the blob store, their rows in the
//! metadata store, so a session survives a restart (the in-memory part is
//! `state::uploads`).
//!
//! A session nobody writes to for the upload TTL is abandoned ([`expire`],
//! run by every garbage collection pass and on its own timer): its row,
//! its data file and its in-memory state go, and garbage collection stops
//! sparing its repository for it.

use crate::error::Result;
use crate::state::app::App;

/// A session a request is writing to is never ended under it.
pub async fn expire(app: &App) -> Result<u64> {
    let (now, ttl) = (app.now(), app.lifetimes.upload_ttl_seconds);
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
pub async fn touch(app: &App, id: &str) -> Result<()> {
    let (i, now) = (id.to_string(), app.now());
    app.meta(move |m| m.touch_upload(&i, now)).await
}

/// Starts a session of `repo`: its data file, its in-memory state and
/// its row (with the time, which upload expiry counts from).
pub async fn start(app: &App, repo: &str) -> Result<String> {
    let id = app.uploads.create().await?;
    let (i, repo, now) = (id.clone(), repo.to_string(), app.now());
    app.meta(move |m| m.put_upload(&i, &repo, now)).await?;
    Ok(id)
}

/// The repository upload session `id` belongs to, if it is open.
pub async fn repo_of(app: &App, id: &str) -> Result<Option<String>> {
    let id = id.to_string();
    app.meta(move |m| m.upload_repo(&id)).await
}

/// Ends session `id`'s row: with the blob it stored linked into its
/// repository (`(repo, digest, size)`), or abandoned.
pub async fn finish(app: &App, id: &str, blob: Option<(&str, &str, u64)>) -> Result<()> {
    let (id, now) = (id.to_string(), app.now());
    let blob = blob.map(|(r, d, s)| (r.to_string(), d.to_string(), s));
    app.meta(move |m| {
        let blob = blob.as_ref().map(|(r, d, s)| (r.as_str(), d.as_str(), *s));
        m.finish_upload(&id, blob, now)
    })
    .await
}
