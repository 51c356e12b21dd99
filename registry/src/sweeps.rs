//! What every replica sharing a metadata store knows of garbage
//! collection (SPEC.md §7.4), so that a pass on one replica is safe while
//! the others serve:
//!
//! - **One pass at a time, store-wide**: a pass holds the GC lease, a row
//!   renewed while it runs and lapsing on its own when its replica dies
//!   (as a push claim does). A lease row rather than PostgreSQL's
//!   `pg_advisory_lock` because it holds on redb too, needs no connection
//!   kept open for the whole pass, and a stalled holder can tell it lost
//!   it before deleting anything more.
//! - **The sweep sequence**: a counter the pass makes odd in the
//!   transaction that removes links, and even again once it has deleted
//!   the bytes nothing links. A request that relies on blob bytes it did
//!   not just write under a live link (an upload that put bytes in the
//!   store, a sync that found a chunk there, a cross-repository mount)
//!   reads the sequence first ([`SweepMark`]), records its link or
//!   manifest, then reads it again ([`App::settle`]): unchanged and even,
//!   no sweep can have deleted those bytes, and every later one sees the
//!   link. Otherwise it waits for that sweep to end and checks that the
//!   bytes are still there (a bucket listing cannot tell bytes put a
//!   moment ago from bytes put long ago when the digest was stored before).
//!
//! Within one process the sweep also holds [`App::sweep`] exclusively, so
//! the requests of its own replica wait instead of checking afterwards.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::error::Result;
use crate::meta::{MetaError, MetaStore};
use crate::store::tables::{Bytes, TableDefinition, WriteTransaction, U64};
use sealvol_spec::Sha256Digest;

/// `"lease"` -> the running pass's [`GcLease`] (JSON).
const GC_LEASE: TableDefinition<Bytes> = TableDefinition::new("gc_lease");
/// `"sweeps"` -> the sweep sequence: odd while a sweep deletes bytes.
const GC_SWEEPS: TableDefinition<U64> = TableDefinition::new("gc_sweeps");
const LEASE: &str = "lease";
const SWEEPS: &str = "sweeps";

/// How long a pass's lease lasts unless renewed; renewed every third.
pub const GC_LEASE_SECONDS: u64 = 60;

pub(crate) fn create_tables(tx: &WriteTransaction) -> std::result::Result<(), MetaError> {
    tx.open_table(GC_LEASE)?;
    tx.open_table(GC_SWEEPS)?;
    Ok(())
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct GcLease {
    token: String,
    holder: String,
    /// Unix seconds.
    until: u64,
}

/// The sweep sequence when a request began to rely on blob bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepMark(u64);

/// What became of a [`SweepMark`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinceMark {
    /// No sweep began or ended since: nothing was deleted meanwhile.
    Untouched,
    /// A sweep is deleting bytes now.
    Sweeping,
    /// A sweep ran since (or its replica died): the bytes need a look.
    Swept,
}

impl MetaStore {
    /// Takes the store-wide GC lease for `holder`: its token, or the
    /// holder of the live lease that keeps it.
    pub fn acquire_gc_lease(
        &self,
        holder: &str,
        now: u64,
        ttl: u64,
    ) -> crate::meta::Result<std::result::Result<String, String>> {
        let tx = self.db.begin_write()?;
        let answer = {
            let mut t = tx.open_table(GC_LEASE)?;
            let live = match t.get(LEASE)? {
                Some(v) => Some(serde_json::from_slice::<GcLease>(v.value())?),
                None => None,
            }
            .filter(|l| l.until > now);
            match live {
                Some(l) => Err(l.holder),
                None => {
                    let lease = GcLease {
                        token: uuid::Uuid::new_v4().to_string(),
                        holder: holder.to_string(),
                        until: now + ttl,
                    };
                    t.insert(LEASE, serde_json::to_vec(&lease)?.as_slice())?;
                    Ok(lease.token)
                }
            }
        };
        tx.commit()?;
        Ok(answer)
    }

    /// Extends the lease `token` holds; false when it lapsed or is
    /// another's.
    pub fn renew_gc_lease(&self, token: &str, now: u64, ttl: u64) -> crate::meta::Result<bool> {
        let tx = self.db.begin_write()?;
        let renewed = {
            let mut t = tx.open_table(GC_LEASE)?;
            let held = match t.get(LEASE)? {
                Some(v) => Some(serde_json::from_slice::<GcLease>(v.value())?),
                None => None,
            };
            match held.filter(|l| l.token == token && l.until > now) {
                Some(mut l) => {
                    l.until = now + ttl;
                    t.insert(LEASE, serde_json::to_vec(&l)?.as_slice())?;
                    true
                }
                None => false,
            }
        };
        tx.commit()?;
        Ok(renewed)
    }

    pub fn release_gc_lease(&self, token: &str) -> crate::meta::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(GC_LEASE)?;
            let mine = match t.get(LEASE)? {
                Some(v) => serde_json::from_slice::<GcLease>(v.value())?.token == token,
                None => false,
            };
            if mine {
                t.remove(LEASE)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Reads the sweep sequence: call before relying on blob bytes.
    pub fn sweep_mark(&self) -> crate::meta::Result<SweepMark> {
        let tx = self.db.begin_read()?;
        let n = tx
            .open_table(GC_SWEEPS)?
            .get(SWEEPS)?
            .map_or(0, |v| v.value());
        Ok(SweepMark(n))
    }

    /// What happened since `mark`, at `now`.
    pub fn since_mark(&self, mark: SweepMark, now: u64) -> crate::meta::Result<SinceMark> {
        let tx = self.db.begin_read()?;
        let n = tx
            .open_table(GC_SWEEPS)?
            .get(SWEEPS)?
            .map_or(0, |v| v.value());
        if n == mark.0 && n % 2 == 0 {
            return Ok(SinceMark::Untouched);
        }
        let live = match tx.open_table(GC_LEASE)?.get(LEASE)? {
            Some(v) => serde_json::from_slice::<GcLease>(v.value())?.until > now,
            None => false,
        };
        Ok(if n % 2 == 1 && live {
            SinceMark::Sweeping
        } else if n == mark.0 {
            // Odd under a lapsed lease, as when the mark was read: that
            // pass's replica died and deletes nothing any more.
            SinceMark::Untouched
        } else {
            SinceMark::Swept
        })
    }

    /// How many sweeps have begun (tests).
    #[cfg(test)]
    pub(crate) fn sweeps_begun(&self) -> u64 {
        self.sweep_mark().unwrap().0.div_ceil(2)
    }
}

/// Makes the sweep sequence odd, in the transaction that removes links;
/// one left odd by a pass whose replica died is moved on to the next odd.
pub(crate) fn begin_sweep(tx: &WriteTransaction) -> std::result::Result<(), MetaError> {
    let mut t = tx.open_table(GC_SWEEPS)?;
    let n = t.get(SWEEPS)?.map_or(0, |v| v.value());
    t.insert(SWEEPS, if n % 2 == 0 { n + 1 } else { n + 2 })?;
    Ok(())
}

impl MetaStore {
    /// Makes the sweep sequence even: the sweep deletes nothing more.
    pub fn end_sweep(&self) -> crate::meta::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(GC_SWEEPS)?;
            let n = t.get(SWEEPS)?.map_or(0, |v| v.value());
            if n % 2 == 1 {
                t.insert(SWEEPS, n + 1)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// The GC lease a pass holds. It is renewed at each step of the pass
/// ([`HeldLease::still_held`]: between manifests read while marking, and
/// between deletions), and released by [`HeldLease::release`]; a pass that
/// fails or panics leaves it to lapse.
pub(crate) struct HeldLease {
    token: String,
    renewed_at: std::sync::Mutex<std::time::Instant>,
}

impl HeldLease {
    /// Takes the lease, or answers who holds it.
    pub(crate) async fn take(app: &App) -> Result<std::result::Result<Self, String>> {
        let holder = app
            .syncs
            .replica
            .get()
            .cloned()
            .unwrap_or_else(|| "this registry".to_string());
        let now = app.now();
        let taken = app
            .meta(move |m| m.acquire_gc_lease(&holder, now, GC_LEASE_SECONDS))
            .await?;
        Ok(taken.map(|token| HeldLease {
            token,
            renewed_at: std::sync::Mutex::new(std::time::Instant::now()),
        }))
    }

    /// Whether the lease is still this pass's, renewing it when a tenth
    /// of it went by: checked before each deletion, so a pass stalled past
    /// its lease stops instead of racing the next.
    pub(crate) async fn still_held(&self, app: &App) -> Result<bool> {
        let due = Duration::from_secs(GC_LEASE_SECONDS / 10);
        if self.renewed_at.lock().expect("lease lock").elapsed() < due {
            return Ok(true);
        }
        let (t, now) = (self.token.clone(), app.now());
        let held = app
            .meta(move |m| m.renew_gc_lease(&t, now, GC_LEASE_SECONDS))
            .await?;
        if held {
            *self.renewed_at.lock().expect("lease lock") = std::time::Instant::now();
        }
        Ok(held)
    }

    pub(crate) async fn release(self, app: &App) {
        let token = self.token;
        if let Err(e) = app.meta(move |m| m.release_gc_lease(&token)).await {
            tracing::warn!(error = %e, "could not release the GC lease");
        }
    }
}

impl App {
    /// The sweep sequence now: read before relying on blob bytes.
    pub(crate) async fn sweep_mark(&self) -> Result<SweepMark> {
        self.meta(|m| m.sweep_mark()).await
    }

    /// After recording a link or manifest that relies on `digests` since
    /// `mark`: waits out a sweep that overlapped, and answers the digests
    /// whose bytes it deleted (none unless a replica collected garbage
    /// while this request ran).
    pub(crate) async fn settle(
        &self,
        mark: SweepMark,
        digests: &[Sha256Digest],
    ) -> Result<Vec<Sha256Digest>> {
        loop {
            let now = self.now();
            match self.meta(move |m| m.since_mark(mark, now)).await? {
                SinceMark::Untouched => return Ok(Vec::new()),
                SinceMark::Sweeping => tokio::time::sleep(Duration::from_millis(100)).await,
                SinceMark::Swept => break,
            }
        }
        let mut gone = Vec::new();
        for d in digests {
            if self.blobs.size(d).await?.is_none() {
                gone.push(*d);
            }
        }
        if !gone.is_empty() {
            tracing::warn!(
                blobs = gone.len(),
                "garbage collection on another replica deleted bytes a request was storing"
            );
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        (dir, m)
    }

    fn sweep(m: &MetaStore) {
        let tx = m.db.begin_write().unwrap();
        begin_sweep(&tx).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn one_pass_at_a_time_until_release_or_lapse() {
        let (_dir, m) = store();
        let a = m.acquire_gc_lease("a", 100, 60).unwrap().unwrap();
        assert_eq!(m.acquire_gc_lease("b", 150, 60).unwrap().unwrap_err(), "a");
        assert!(m.renew_gc_lease(&a, 150, 60).unwrap());
        assert!(m.acquire_gc_lease("b", 200, 60).unwrap().is_err());
        // Lapsed at 210: b takes it, and a can neither renew nor release it.
        let b = m.acquire_gc_lease("b", 210, 60).unwrap().unwrap();
        assert!(!m.renew_gc_lease(&a, 211, 60).unwrap());
        m.release_gc_lease(&a).unwrap();
        assert!(m.acquire_gc_lease("c", 212, 60).unwrap().is_err());
        m.release_gc_lease(&b).unwrap();
        assert!(m.acquire_gc_lease("c", 212, 60).unwrap().is_ok());
    }

    #[test]
    fn a_mark_tells_whether_a_sweep_overlapped() {
        let (_dir, m) = store();
        let before = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Untouched);

        // A sweep under a live lease: in progress, then over.
        let token = m.acquire_gc_lease("a", 100, 60).unwrap().unwrap();
        sweep(&m);
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Sweeping);
        let during = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(during, 100).unwrap(), SinceMark::Sweeping);
        m.end_sweep().unwrap();
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Swept);
        assert_eq!(m.since_mark(during, 100).unwrap(), SinceMark::Swept);
        let after = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 100).unwrap(), SinceMark::Untouched);
        m.release_gc_lease(&token).unwrap();

        // A pass whose replica died mid-sweep: odd, lease lapsed.
        m.acquire_gc_lease("a", 200, 60).unwrap().unwrap();
        sweep(&m);
        let dead = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 300).unwrap(), SinceMark::Swept);
        assert_eq!(m.since_mark(dead, 300).unwrap(), SinceMark::Untouched);
        // The next sweep moves on to the next odd number.
        m.acquire_gc_lease("b", 300, 60).unwrap().unwrap();
        sweep(&m);
        assert_eq!(m.since_mark(dead, 300).unwrap(), SinceMark::Sweeping);
        assert_eq!(m.sweeps_begun(), 3);
    }
}
