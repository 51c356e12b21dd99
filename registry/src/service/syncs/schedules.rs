//! Sync schedules (SPEC.md §8.6): a stored sync request that a registry
//! starts as a job every interval, such as a training run's latest
//! checkpoint published to a tag. A schedule is made with `push` on its
//! destination and checked then as a job is (`jobs::check_request`); its
//! jobs run with that authority. It is read with `pull`, and paused,
//! resumed or deleted with `push`. [`run_schedules`] is the loop each
//! replica that runs jobs keeps; which replica starts a run is decided in
//! one metadata transaction (`store::meta::schedules`).

use std::sync::Arc;
use std::time::Duration;

use sealvol_spec::api;
use sealvol_spec::api::Action;

use crate::auth::Caller;
use crate::error::{Code, RegistryError, Result};
use crate::service::syncs::jobs;
use crate::state::app::App;
use crate::store::meta::schedules::Schedule;
use crate::store::meta::syncs::SyncJob;

/// The longest a replica sleeps between looks: a schedule another replica
/// made or resumed is found within this.
const LOOK_EVERY: Duration = Duration::from_secs(10);

fn view(app: &App, s: Schedule, last: Option<SyncJob>) -> api::SyncSchedule {
    s.view(last.map(|j| jobs::view(app, j)))
}

/// `POST /api/v1/schedules`.
pub(crate) async fn create(
    app: &App,
    caller: &Caller,
    body: api::ScheduleRequest,
) -> Result<api::SyncSchedule> {
    let every = api::every_seconds(&body.every, app.syncs.schedule_min_every())
        .map_err(|e| RegistryError::new(Code::Invalid, e.to_string()))?;
    jobs::check_request(app, caller, &body.sync).await?;
    let s = Schedule::new(body.sync, every, caller.is_admin(), app.now());
    let stored = s.clone();
    app.meta(move |m| m.create_schedule(&stored)).await?;
    app.syncs.schedules_changed.notify_one();
    Ok(view(app, s, None))
}

/// `GET /api/v1/schedules[?dest=NAME]`: those whose destination the caller
/// may pull, oldest first.
pub(crate) async fn list(
    app: &App,
    caller: &Caller,
    dest: Option<String>,
) -> Result<api::ScheduleList> {
    let all = app.meta(move |m| m.schedules(dest.as_deref())).await?;
    let schedules = all
        .into_iter()
        .filter(|(s, _)| caller.sees(&s.sync.dest.name))
        .map(|(s, last)| view(app, s, last))
        .collect();
    Ok(api::ScheduleList { schedules })
}

/// Schedule `id` and its last job, if the caller may do `action` to its
/// destination.
async fn schedule_for(
    app: &App,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<(Schedule, Option<SyncJob>)> {
    let i = id.to_string();
    let found = app.meta(move |m| m.schedule(&i)).await?;
    let found = found.ok_or_else(|| unknown_schedule(id))?;
    caller.check(&found.0.sync.dest.name, action)?;
    Ok(found)
}

/// `GET /api/v1/schedules/ID`.
pub(crate) async fn describe(app: &App, caller: &Caller, id: &str) -> Result<api::SyncSchedule> {
    let (s, last) = schedule_for(app, caller, id, Action::Pull).await?;
    Ok(view(app, s, last))
}

/// `POST /api/v1/schedules/ID/pause` (`paused`) and `…/resume`. Resuming
/// makes the schedule due at once, as a new one is: a run missed while
/// paused is what the user wants now.
pub(crate) async fn set_paused(
    app: &App,
    caller: &Caller,
    id: &str,
    paused: bool,
) -> Result<api::ScheduleChanged> {
    schedule_for(app, caller, id, Action::Push).await?;
    let (i, now) = (id.to_string(), app.now());
    let updated = app
        .meta(move |m| {
            m.update_schedule(&i, |s| {
                if s.paused == paused {
                    return false;
                }
                s.paused = paused;
                if !paused {
                    s.next_run = now;
                }
                true
            })
        })
        .await?;
    let Some((s, changed)) = updated else {
        return Err(unknown_schedule(id));
    };
    if changed && !paused {
        app.syncs.schedules_changed.notify_one();
    }
    let last = match s.last_job.clone() {
        Some(j) => app.meta(move |m| m.sync(&j)).await?,
        None => None,
    };
    Ok(api::ScheduleChanged {
        changed,
        schedule: view(app, s, last),
    })
}

/// `DELETE /api/v1/schedules/ID`: no more runs; a job it started goes on
/// (cancel it as any job).
pub(crate) async fn delete(app: &App, caller: &Caller, id: &str) -> Result<()> {
    schedule_for(app, caller, id, Action::Push).await?;
    let i = id.to_string();
    if app.meta(move |m| m.delete_schedule(&i)).await? {
        Ok(())
    } else {
        Err(unknown_schedule(id))
    }
}

/// Starts each schedule's runs as they fall due, for as long as the
/// registry runs. Every replica that runs jobs keeps this loop; the
/// metadata store lets one of them start each run.
pub async fn run_schedules(app: Arc<App>) {
    loop {
        // Registered before looking, so a schedule made meanwhile wakes us.
        let changed = app.syncs.schedules_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let now = app.now();
        let sleep = match app.meta(move |m| m.start_due_schedules(now)).await {
            Ok(queued) => {
                for job in &queued {
                    tracing::info!(
                        sync = %job.id,
                        schedule = job.schedule.as_deref().unwrap_or(""),
                        source = %job.source,
                        dest = %job.dest.name,
                        "scheduled sync queued"
                    );
                }
                if !queued.is_empty() {
                    app.syncs.wake.notify_waiters();
                }
                match app.meta(|m| m.next_schedule_due()).await {
                    Ok(Some(due)) => Duration::from_secs(due.saturating_sub(app.now()).max(1)),
                    Ok(None) => LOOK_EVERY,
                    Err(e) => {
                        tracing::error!("sync schedules: {e}");
                        LOOK_EVERY
                    }
                }
            }
            Err(e) => {
                tracing::error!("sync schedules: {e}");
                LOOK_EVERY
            }
        };
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep(sleep.min(LOOK_EVERY)) => {}
        }
    }
}

pub(crate) fn unknown_schedule(id: &str) -> RegistryError {
    RegistryError::new(
        Code::ScheduleUnknown,
        format!("schedule {id} is not on this registry"),
    )
}
