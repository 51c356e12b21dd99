//! The sync API's handlers (SPEC.md §8.3): creating a job checks all it
//! can without the source (URI, destination, globs, secret, `dir://`
//! policy) so a typo is a 400 rather than a failed job; cancel takes the
//! commit lock so a job is either sealed or canceled, never both. Routing
//! is `volume_api`'s; running jobs is [`crate::sync_runner`]'s.

use std::sync::atomic::Ordering;

use sealvol_spec::api;
use sealvol_spec::filter::Filter;
use sealvol_spec::Tag;
use sealvol_sync::SourceOptions;

use crate::app::App;
use crate::error::{Code, RegistryError, Result};
use crate::sync_jobs::{SyncJob, SyncProgress, SyncState};

fn invalid(why: impl Into<String>) -> RegistryError {
    RegistryError::new(Code::Invalid, why)
}

/// The job with live byte counts when it is running.
pub(crate) fn view(app: &App, mut job: SyncJob) -> api::SyncJob {
    if job.state == SyncState::Running {
        if let Some(r) = app.syncs.running(&job.id) {
            job.progress.bytes_done = r.bytes_done.load(Ordering::Relaxed);
            job.progress.bytes_stored = r.bytes_stored.load(Ordering::Relaxed);
        }
    }
    job.view()
}

pub(crate) async fn create(app: &App, body: api::SyncRequest) -> Result<api::SyncJob> {
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
    let secret = body.secret.map(String::from);
    if let Some(s) = &secret {
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
        secret,
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

pub(crate) async fn cancel(app: &App, id: String) -> Result<api::Canceled> {
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
    Ok(api::Canceled {
        changed,
        sync: view(app, job),
    })
}

pub(crate) fn unknown_sync(id: &str) -> RegistryError {
    RegistryError::new(
        Code::SyncUnknown,
        format!("sync {id} is not on this registry"),
    )
}
