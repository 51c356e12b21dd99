//! What the sync API does (SPEC.md §8.3): creating a job checks all it
//! can without the source (URI, destination, globs, secret, `dir://`
//! policy) so a typo is a 400 rather than a failed job; cancel takes the
//! commit lock so a job is either sealed or canceled, never both. A job is
//! read with `pull` and created or canceled with `push` on its destination
//! (SPEC.md §7.5), decided here since the destination is in the body or
//! the record; secrets are admin-only, decided by the auth layer. The
//! handlers are `http::api::syncs` and `http::api::admin`; running jobs
//! is [`crate::service::syncs::runner`]'s.

use std::sync::atomic::Ordering;

use sealvol_spec::api;
use sealvol_spec::filter::Filter;
use sealvol_spec::Tag;
use sealvol_sync::SourceOptions;

use crate::auth::Caller;
use crate::error::{Code, RegistryError, Result};
use crate::state::app::App;
use crate::store::meta::secrets;
use crate::store::meta::syncs::{SyncJob, SyncState};
use sealvol_spec::api::Action;

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

/// Checks all a job of `caller` asking `body` can be checked for without
/// its source: a new job's, and a new schedule's (whose jobs run with the
/// authority checked here, SPEC.md §8.6).
pub(crate) async fn check_request(
    app: &App,
    caller: &Caller,
    body: &api::SyncRequest,
) -> Result<()> {
    caller.check(&body.dest.name, Action::Push)?;
    let net = app.syncs.net.read().expect("net lock").clone();
    let opts = SourceOptions {
        net: net.clone(),
        ..Default::default()
    };
    sealvol_sync::open(&body.source, &opts).map_err(|e| invalid(e.message))?;
    if let Some(why) = app
        .syncs
        .dirs
        .read()
        .expect("dirs lock")
        .refuse(&body.source)
    {
        return Err(invalid(why));
    }
    crate::service::volumes::check_volume_name(&body.dest.name)?;
    if let Some(t) = &body.dest.tag {
        let tag: Tag = t
            .parse()
            .map_err(|e: sealvol_spec::reference::RefError| invalid(e.to_string()))?;
        if crate::store::meta::volumes::is_reserved(tag.as_str()) {
            return Err(RegistryError::new(
                Code::TagReserved,
                format!("tag {t} is the registry's; choose another"),
            ));
        }
    }
    Filter::new(&body.include, &body.exclude).map_err(|e| invalid(e.to_string()))?;
    let secret = body.secret.as_ref().map(|s| s.to_string());
    let stored = match &secret {
        None => None,
        Some(s) => {
            let n = s.clone();
            let stored = app.meta(move |m| m.secret(&n)).await?;
            Some(stored.ok_or_else(|| {
                RegistryError::new(
                    Code::SecretUnknown,
                    format!(
                        "secret {s} is not on this registry; store it with `sealvol secret set {s}`"
                    ),
                )
            })?)
        }
    };
    // Before any connection: a secret goes only where it is bound, and an
    // endpoint override only where the admin or the binding allows.
    if let Some(why) = secrets::endpoint_refusal(&body.source, stored.as_ref(), &net) {
        return Err(RegistryError::new(Code::Denied, why));
    }
    if let (Some(name), Some(s)) = (&secret, &stored) {
        if let Some(why) = s.refusal(name, &body.source, &body.dest.name, caller.is_admin(), &net) {
            return Err(RegistryError::new(Code::Denied, why));
        }
    }
    Ok(())
}

/// `POST /api/v1/syncs`.
pub(crate) async fn create(
    app: &App,
    caller: &Caller,
    body: api::SyncRequest,
) -> Result<api::SyncJob> {
    check_request(app, caller, &body).await?;
    let job = SyncJob::queued(body, caller.is_admin(), app.now());
    let job = app.meta(move |m| m.create_sync(job)).await?;
    app.syncs.wake.notify_one();
    Ok(job.view())
}

/// `GET /api/v1/syncs[?dest=NAME]`: the jobs whose destination the caller
/// may pull, newest first.
pub(crate) async fn list(
    app: &App,
    caller: &Caller,
    dest: Option<String>,
) -> Result<api::SyncList> {
    let jobs = app.meta(move |m| m.syncs(dest.as_deref())).await?;
    let syncs = jobs
        .into_iter()
        .filter(|j| caller.sees(&j.dest.name))
        .map(|j| view(app, j))
        .collect();
    Ok(api::SyncList { syncs })
}

/// The job `id`, if the caller may do `action` to its destination.
async fn job_for(app: &App, caller: &Caller, id: &str, action: Action) -> Result<SyncJob> {
    let i = id.to_string();
    let job = app.meta(move |m| m.sync(&i)).await?;
    let job = job.ok_or_else(|| unknown_sync(id))?;
    caller.check(&job.dest.name, action)?;
    Ok(job)
}

/// `GET /api/v1/syncs/ID`.
pub(crate) async fn describe(app: &App, caller: &Caller, id: &str) -> Result<api::SyncJob> {
    Ok(view(app, job_for(app, caller, id, Action::Pull).await?))
}

/// `POST /api/v1/syncs/ID/cancel`.
pub(crate) async fn cancel(app: &App, caller: &Caller, id: String) -> Result<api::Canceled> {
    job_for(app, caller, &id, Action::Push).await?;
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

/// `GET /api/v1/secrets`: names and bindings, never values.
pub(crate) async fn list_secrets(app: &App) -> Result<api::SecretList> {
    let secrets = app.meta(|m| m.secrets()).await?;
    Ok(api::SecretList { secrets })
}

fn secret_name(name: &str) -> Result<String> {
    Ok(name
        .parse::<api::SecretName>()
        .map_err(|e| invalid(e.to_string()))?
        .to_string())
}

/// The name of a secret `PUT /api/v1/secrets/NAME?for=URI…[&dest=GLOB…]`
/// stores, checked with its binding before its value is read.
pub(crate) fn check_secret(name: &str, for_sources: &[String], dest: &[String]) -> Result<String> {
    let name = secret_name(name)?;
    secrets::check_binding(for_sources, dest).map_err(invalid)?;
    Ok(name)
}

/// Stores secret `name` (checked by [`check_secret`]) with `value`,
/// sealed, bound to `for_sources` and `dest`; an empty value keeps the
/// stored one and binds it anew.
pub(crate) async fn set_secret(
    app: &App,
    name: String,
    for_sources: Vec<String>,
    dest: Vec<String>,
    value: bytes::Bytes,
) -> Result<()> {
    let key = app
        .syncs
        .key
        .get()
        .ok_or_else(|| RegistryError::Internal("the registry has no secrets key".into()))?;
    let stored = if value.is_empty() {
        let n = name.clone();
        let old = app.meta(move |m| m.secret(&n)).await?.ok_or_else(|| {
            RegistryError::new(
                Code::SecretUnknown,
                format!("secret {name} is not on this registry; send its value to store it"),
            )
        })?;
        old.rebound(for_sources, dest)
    } else {
        secrets::StoredSecret::seal(key, &name, &value, for_sources, dest)
    };
    app.meta(move |m| m.set_secret(&name, &stored)).await?;
    Ok(())
}

/// `DELETE /api/v1/secrets/NAME`.
pub(crate) async fn delete_secret(app: &App, name: &str) -> Result<()> {
    let name = secret_name(name)?;
    let n = name.clone();
    if app.meta(move |m| m.delete_secret(&n)).await? {
        Ok(())
    } else {
        Err(RegistryError::new(
            Code::SecretUnknown,
            format!("secret {name} is not on this registry"),
        ))
    }
}

pub(crate) fn unknown_sync(id: &str) -> RegistryError {
    RegistryError::new(
        Code::SyncUnknown,
        format!("sync {id} is not on this registry"),
    )
}
