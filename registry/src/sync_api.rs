//! The sync API's handlers (SPEC.md §8.3): creating a job checks all it
//! can without the source (URI, destination, globs, secret, `dir://`
//! policy) so a typo is a 400 rather than a failed job; cancel takes the
//! commit lock so a job is either sealed or canceled, never both. Routing
//! is `volume_api`'s; running jobs is [`crate::sync_runner`]'s.

use std::sync::atomic::Ordering;

use sealvol_spec::filter::Filter;
use sealvol_spec::Tag;
use sealvol_sync::SourceOptions;
use serde::Deserialize;

use crate::api::App;
use crate::error::{Code, RegistryError, Result};
use crate::sync_jobs::{Dest, SyncJob, SyncProgress, SyncState};

#[derive(Deserialize)]
pub(crate) struct CreateBody {
    source: String,
    dest: Dest,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    secret: Option<String>,
}

impl CreateBody {
    /// The volume the job writes to, which the caller must be allowed to push to.
    pub(crate) fn dest_name(&self) -> &str {
        &self.dest.name
    }
}

fn invalid(why: impl Into<String>) -> RegistryError {
    RegistryError::new(Code::Invalid, why)
}

/// The job with live byte counts when it is running.
pub(crate) fn view(app: &App, mut job: SyncJob) -> serde_json::Value {
    if job.state == SyncState::Running {
        if let Some(r) = app.syncs.running(&job.id) {
            job.progress.bytes_done = r.bytes_done.load(Ordering::Relaxed);
            job.progress.bytes_stored = r.bytes_stored.load(Ordering::Relaxed);
        }
    }
    job.view()
}

pub(crate) async fn create(app: &App, body: CreateBody) -> Result<serde_json::Value> {
    sealvol_sync::open(&body.source, &SourceOptions::default()).map_err(|e| invalid(e.message))?;
    if let Some(why) = app
        .syncs
        .dirs
        .read()
        .expect("dirs lock")
        .refuse(&body.source)
    {
        return Err(invalid(why));
    }
    crate::volume_api::check_volume_name(&body.dest.name)?;
    if let Some(t) = &body.dest.tag {
        let tag: Tag = t
            .parse()
            .map_err(|e: sealvol_spec::reference::RefError| invalid(e.to_string()))?;
        if crate::volumes::is_reserved(tag.as_str()) {
            return Err(RegistryError::new(
                Code::TagReserved,
                format!("tag {t} is the registry's; choose another"),
            ));
        }
    }
    Filter::new(&body.include, &body.exclude).map_err(|e| invalid(e.to_string()))?;
    if let Some(s) = &body.secret {
        let n = s.clone();
        if app.meta(move |m| m.secret(&n)).await?.is_none() {
            return Err(RegistryError::new(
                Code::SecretUnknown,
                format!(
                    "secret {s} is not on this registry; store it with `sealvol secret set {s}`"
                ),
            ));
        }
    }
    let job = SyncJob {
        id: format!("sync-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]),
        seq: 0,
        state: SyncState::Queued,
        source: body.source,
        pinned_source: None,
        dest: body.dest,
        include: body.include,
        exclude: body.exclude,
        secret: body.secret,
        progress: SyncProgress::default(),
        attempts: 0,
        retries: 0,
        retrying: None,
        created_at: app.now(),
        started_at: None,
        finished_at: None,
        version: None,
        error: None,
    };
    let job = app.meta(move |m| m.create_sync(job)).await?;
    app.syncs.wake.notify_one();
    Ok(job.view())
}

pub(crate) async fn cancel(app: &App, id: String) -> Result<serde_json::Value> {
    let _commit = app.syncs.commit.lock().await;
    let now = app.now();
    let i = id.clone();
    let updated = app
        .meta(move |m| {
            m.update_sync(&i, |j| {
                if j.state.is_finished() {
                    return false;
                }
                j.state = SyncState::Canceled;
                j.finished_at = Some(now);
                j.retrying = None;
                true
            })
        })
        .await?;
    let Some((job, changed)) = updated else {
        return Err(unknown_sync(&id));
    };
    if let Some(r) = app.syncs.running(&id) {
        r.cancel.store(true, Ordering::Relaxed);
    }
    Ok(serde_json::json!({ "changed": changed, "sync": view(app, job) }))
}

pub(crate) fn unknown_sync(id: &str) -> RegistryError {
    RegistryError::new(
        Code::SyncUnknown,
        format!("sync {id} is not on this registry"),
    )
}
