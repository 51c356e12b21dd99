//! Sync schedules as the registry stores them (SPEC.md §8.6): one row per
//! schedule. Starting a schedule's job is one transaction that reads the
//! schedule, queues the job and moves the schedule's next run, and every
//! write transaction is serialized across replicas (redb's one writer,
//! PostgreSQL's advisory lock), so two replicas never start one run twice.
//! The job itself is then leased like any other.

use crate::clock::rfc3339;
use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::{Bytes, ReadableTable, WriteTransaction};
use crate::store::meta::error::Result;
use crate::store::meta::schema::{SYNC_JOBS, SYNC_SCHEDULES};
use crate::store::meta::syncs::{get_job, next_seq, put_job, SyncJob};
use sealvol_spec::api;
use serde::{Deserialize, Serialize};

/// A schedule as stored; [`Schedule::view`] is its API form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// `sched-<16 hex>`.
    pub id: String,
    /// What each run asks for; checked when the schedule was made.
    #[serde(flatten)]
    pub sync: api::SyncRequest,
    /// Whether an admin made it: its jobs are then an admin's (SPEC.md
    /// §8.3's secret rule).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_admin: bool,
    /// Seconds between runs.
    pub every: u64,
    pub paused: bool,
    pub created_at: u64,
    /// Unix seconds when it is next due (kept while paused; resuming
    /// sets it anew).
    pub next_run: u64,
    pub runs: u64,
    pub skipped: u64,
    /// The id of the last job it started.
    pub last_job: Option<String>,
}

impl Schedule {
    /// A new schedule of `request`, due at once: a schedule's first run
    /// publishes what the source holds now.
    pub fn new(request: api::SyncRequest, every: u64, by_admin: bool, now: u64) -> Schedule {
        Schedule {
            id: format!("sched-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]),
            sync: request,
            by_admin,
            every,
            paused: false,
            created_at: now,
            next_run: now,
            runs: 0,
            skipped: 0,
            last_job: None,
        }
    }

    /// The first due time after `now` on this schedule's beat: runs a
    /// stopped registry missed are not made up one by one, only once.
    fn next_after(&self, now: u64) -> u64 {
        let every = self.every.max(1);
        if self.next_run > now {
            return self.next_run;
        }
        self.next_run + ((now - self.next_run) / every + 1) * every
    }

    /// The schedule as the API shows it, with its last job as it is now.
    pub fn view(self, last_run: Option<api::SyncJob>) -> api::SyncSchedule {
        api::SyncSchedule {
            id: self.id,
            sync: self.sync,
            every: api::every_text(self.every),
            every_seconds: self.every,
            paused: self.paused,
            created_at: Some(rfc3339(self.created_at)),
            next_run_at: (!self.paused).then(|| rfc3339(self.next_run)),
            runs: self.runs,
            skipped: self.skipped,
            last_run,
        }
    }
}

fn get_schedule(t: &impl ReadableTable<Bytes>, id: &str) -> Result<Option<Schedule>> {
    match t.get(id)? {
        Some(v) => Ok(Some(serde_json::from_slice(v.value())?)),
        None => Ok(None),
    }
}

fn put_schedule(tx: &WriteTransaction, s: &Schedule) -> Result<()> {
    tx.open_table(SYNC_SCHEDULES)?
        .insert(s.id.as_str(), serde_json::to_vec(s)?.as_slice())?;
    Ok(())
}

fn all(t: &impl ReadableTable<Bytes>) -> Result<Vec<Schedule>> {
    let mut out = Vec::new();
    for row in t.iter()? {
        let (_, v) = row?;
        out.push(serde_json::from_slice::<Schedule>(v.value())?);
    }
    out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    Ok(out)
}

impl MetaStore {
    pub fn create_schedule(&self, s: &Schedule) -> Result<()> {
        let tx = self.db.begin_write()?;
        put_schedule(&tx, s)?;
        tx.commit()?;
        Ok(())
    }

    /// Schedule `id`, with its last job.
    pub fn schedule(&self, id: &str) -> Result<Option<(Schedule, Option<SyncJob>)>> {
        let tx = self.db.begin_read()?;
        let Some(s) = get_schedule(&tx.open_table(SYNC_SCHEDULES)?, id)? else {
            return Ok(None);
        };
        let jobs = tx.open_table(SYNC_JOBS)?;
        let last = match &s.last_job {
            Some(j) => get_job(&jobs, j)?,
            None => None,
        };
        Ok(Some((s, last)))
    }

    /// Schedules, oldest first, optionally only those into volume `dest`,
    /// each with its last job.
    pub fn schedules(&self, dest: Option<&str>) -> Result<Vec<(Schedule, Option<SyncJob>)>> {
        let tx = self.db.begin_read()?;
        let jobs = tx.open_table(SYNC_JOBS)?;
        let mut out = Vec::new();
        for s in all(&tx.open_table(SYNC_SCHEDULES)?)? {
            if dest.is_some_and(|d| d != s.sync.dest.name) {
                continue;
            }
            let last = match &s.last_job {
                Some(j) => get_job(&jobs, j)?,
                None => None,
            };
            out.push((s, last));
        }
        Ok(out)
    }

    /// Applies `f` to schedule `id` in one transaction, unless `f` answers
    /// false (nothing is written then). Answers it as it now is.
    pub fn update_schedule(
        &self,
        id: &str,
        f: impl FnOnce(&mut Schedule) -> bool,
    ) -> Result<Option<(Schedule, bool)>> {
        let tx = self.db.begin_write()?;
        let Some(mut s) = get_schedule(&tx.open_table(SYNC_SCHEDULES)?, id)? else {
            return Ok(None);
        };
        let changed = f(&mut s);
        if changed {
            put_schedule(&tx, &s)?;
            tx.commit()?;
        }
        Ok(Some((s, changed)))
    }

    /// Deletes schedule `id`; the jobs it started stay. False when there
    /// was none.
    pub fn delete_schedule(&self, id: &str) -> Result<bool> {
        let tx = self.db.begin_write()?;
        let removed = tx.open_table(SYNC_SCHEDULES)?.remove(id)?.is_some();
        if removed {
            tx.commit()?;
        }
        Ok(removed)
    }

    /// When the earliest schedule that is not paused is due (Unix
    /// seconds); `None` when none is.
    pub fn next_schedule_due(&self) -> Result<Option<u64>> {
        let tx = self.db.begin_read()?;
        Ok(all(&tx.open_table(SYNC_SCHEDULES)?)?
            .iter()
            .filter(|s| !s.paused)
            .map(|s| s.next_run)
            .min())
    }

    /// Starts the runs due at `now`, in one transaction: each schedule due
    /// queues a job, unless its last job has not finished, which skips
    /// the run (a checkpoint sync slower than its interval does not pile
    /// up jobs); either way its next run moves to its next beat after
    /// `now`. Answers the jobs queued.
    pub fn start_due_schedules(&self, now: u64) -> Result<Vec<SyncJob>> {
        if self.next_schedule_due()?.is_none_or(|t| t > now) {
            return Ok(Vec::new());
        }
        let tx = self.db.begin_write()?;
        let due: Vec<Schedule> = all(&tx.open_table(SYNC_SCHEDULES)?)?
            .into_iter()
            .filter(|s| !s.paused && s.next_run <= now)
            .collect();
        let mut queued = Vec::new();
        for mut s in due {
            let busy = match &s.last_job {
                Some(j) => {
                    get_job(&tx.open_table(SYNC_JOBS)?, j)?.is_some_and(|j| !j.state.is_finished())
                }
                None => false,
            };
            if busy {
                s.skipped += 1;
            } else {
                let mut job = SyncJob::queued(s.sync.clone(), s.by_admin, now);
                job.schedule = Some(s.id.clone());
                job.seq = next_seq(&tx)?;
                put_job(&tx, &job)?;
                s.runs += 1;
                s.last_job = Some(job.id.clone());
                queued.push(job);
            }
            s.next_run = s.next_after(now);
            put_schedule(&tx, &s)?;
        }
        tx.commit()?;
        Ok(queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::meta::syncs::{SyncDest, SyncState};

    fn request() -> api::SyncRequest {
        api::SyncRequest {
            source: "s3://b/run-42".into(),
            dest: SyncDest {
                name: "ckpt/run-42".into(),
                tag: Some("latest".into()),
            },
            include: vec!["*.safetensors".into()],
            exclude: vec![],
            secret: None,
        }
    }

    #[test]
    fn a_schedule_runs_at_once_then_on_its_beat() {
        let (_dir, m) = MetaStore::temporary();
        let s = Schedule::new(request(), 600, false, 1000);
        m.create_schedule(&s).unwrap();
        let jobs = m.start_due_schedules(1000).unwrap();
        assert_eq!(jobs.len(), 1);
        let job = &jobs[0];
        assert_eq!(job.schedule.as_deref(), Some(s.id.as_str()));
        assert_eq!(job.state, SyncState::Queued);
        assert_eq!(job.source, "s3://b/run-42");
        assert_eq!(job.dest.tag.as_deref(), Some("latest"));
        assert_eq!(job.include, ["*.safetensors"]);
        assert_eq!(m.sync(&job.id).unwrap().as_ref(), Some(job));
        // Not due again before its beat.
        assert!(m.start_due_schedules(1599).unwrap().is_empty());
        let (stored, last) = m.schedule(&s.id).unwrap().unwrap();
        assert_eq!((stored.runs, stored.next_run), (1, 1600));
        assert_eq!(last.unwrap().id, job.id);
    }

    #[test]
    fn a_run_due_while_the_last_job_runs_is_skipped() {
        let (_dir, m) = MetaStore::temporary();
        let s = Schedule::new(request(), 60, false, 0);
        m.create_schedule(&s).unwrap();
        let first = m.start_due_schedules(0).unwrap().remove(0);
        assert!(m.start_due_schedules(60).unwrap().is_empty());
        let (stored, _) = m.schedule(&s.id).unwrap().unwrap();
        assert_eq!((stored.runs, stored.skipped, stored.next_run), (1, 1, 120));
        m.update_sync(&first.id, |j| {
            j.state = SyncState::Ready;
            true
        })
        .unwrap();
        let second = m.start_due_schedules(120).unwrap();
        assert_eq!(second.len(), 1);
        assert_ne!(second[0].id, first.id);
        assert!(second[0].seq > first.seq);
    }

    #[test]
    fn missed_runs_are_made_up_once_on_the_same_beat() {
        let (_dir, m) = MetaStore::temporary();
        let s = Schedule::new(request(), 60, false, 0);
        m.create_schedule(&s).unwrap();
        m.start_due_schedules(0).unwrap();
        // Down for ten minutes, with the last job finished.
        let last = m.schedule(&s.id).unwrap().unwrap().1.unwrap();
        m.update_sync(&last.id, |j| {
            j.state = SyncState::Failed;
            true
        })
        .unwrap();
        assert_eq!(m.start_due_schedules(630).unwrap().len(), 1);
        let (stored, _) = m.schedule(&s.id).unwrap().unwrap();
        assert_eq!((stored.runs, stored.next_run), (2, 660));
    }

    #[test]
    fn paused_schedules_start_nothing_and_deleted_ones_are_gone() {
        let (_dir, m) = MetaStore::temporary();
        let s = Schedule::new(request(), 60, false, 0);
        m.create_schedule(&s).unwrap();
        m.update_schedule(&s.id, |s| {
            s.paused = true;
            true
        })
        .unwrap();
        assert!(m.start_due_schedules(1000).unwrap().is_empty());
        assert_eq!(m.next_schedule_due().unwrap(), None);
        let view = m.schedule(&s.id).unwrap().unwrap().0.view(None);
        assert!(view.paused && view.next_run_at.is_none(), "{view:?}");
        assert!(m.delete_schedule(&s.id).unwrap());
        assert!(!m.delete_schedule(&s.id).unwrap());
        assert!(m.schedules(None).unwrap().is_empty());
    }

    #[test]
    fn a_migration_copies_schedules() {
        let (_a, from) = MetaStore::temporary();
        let (_b, to) = MetaStore::temporary();
        let s = Schedule::new(request(), 60, false, 0);
        from.create_schedule(&s).unwrap();
        assert!(!from.is_empty().unwrap());
        from.copy_into(&to).unwrap();
        assert_eq!(to.schedule(&s.id).unwrap().unwrap().0, s);
    }
}
