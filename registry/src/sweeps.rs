//! What every replica sharing a metadata store knows of garbage
//! collection (SPEC.md §7.4), so that a pass on one replica is safe while
//! the others serve:
//!
//! - **One pass at a time, store-wide**: a pass holds the GC lease, a push
//!   claim ([`crate::claims`]) on a name no volume can have, renewed while
//!   it runs and lapsing on its own when its replica dies. A claim row
//!   rather than PostgreSQL's `pg_advisory_lock` because it holds on redb
//!   too, needs no connection kept open for the whole pass, and a stalled
//!   holder can tell it lost it before deleting anything more.
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

use crate::app::App;
use crate::error::Result;
use crate::meta::{MetaError, MetaStore};
use crate::store::tables::{TableDefinition, WriteTransaction, U64};
use sealvol_spec::Sha256Digest;

/// `"sweeps"` -> the sweep sequence: odd while a sweep deletes bytes.
const GC_SWEEPS: TableDefinition<U64> = TableDefinition::new("gc_sweeps");
const SWEEPS: &str = "sweeps";
/// The push claim that is the GC lease: NUL is in no volume name.
pub(crate) const GC_CLAIM: &str = "\0gc";

/// How long a pass's lease lasts unless renewed (at each step of the
/// pass once a tenth of it went by).
pub const GC_LEASE_SECONDS: u64 = 60;

pub(crate) fn create_tables(tx: &WriteTransaction) -> std::result::Result<(), MetaError> {
    tx.open_table(GC_SWEEPS)?;
    Ok(())
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
        let live = crate::claims::live(&tx, GC_CLAIM, now)?;
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
            .meta(move |m| m.acquire_claim(GC_CLAIM, &holder, now, GC_LEASE_SECONDS))
            .await?;
        Ok(taken
            .map(|c| HeldLease {
                token: c.token,
                renewed_at: std::sync::Mutex::new(std::time::Instant::now()),
            })
            .map_err(|held| held.holder))
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
            .meta(move |m| m.renew_claim(GC_CLAIM, &t, now, GC_LEASE_SECONDS))
            .await?
            .is_some();
        if held {
            *self.renewed_at.lock().expect("lease lock") = std::time::Instant::now();
        }
        Ok(held)
    }

    pub(crate) async fn release(self, app: &App) {
        let token = self.token;
        if let Err(e) = app.meta(move |m| m.release_claim(GC_CLAIM, &token)).await {
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
        MetaStore::temporary()
    }

    fn sweep(m: &MetaStore) {
        let tx = m.db.begin_write().unwrap();
        begin_sweep(&tx).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn a_mark_tells_whether_a_sweep_overlapped() {
        let (_dir, m) = store();
        let before = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Untouched);

        // A sweep under a live lease: in progress, then over.
        let token = m
            .acquire_claim(GC_CLAIM, "a", 100, 60)
            .unwrap()
            .unwrap()
            .token;
        sweep(&m);
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Sweeping);
        let during = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(during, 100).unwrap(), SinceMark::Sweeping);
        m.end_sweep().unwrap();
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Swept);
        assert_eq!(m.since_mark(during, 100).unwrap(), SinceMark::Swept);
        let after = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 100).unwrap(), SinceMark::Untouched);
        m.release_claim(GC_CLAIM, &token).unwrap();

        // A pass whose replica died mid-sweep: odd, lease lapsed.
        m.acquire_claim(GC_CLAIM, "a", 200, 60).unwrap().unwrap();
        sweep(&m);
        let dead = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 300).unwrap(), SinceMark::Swept);
        assert_eq!(m.since_mark(dead, 300).unwrap(), SinceMark::Untouched);
        // The next sweep moves on to the next odd number.
        m.acquire_claim(GC_CLAIM, "b", 300, 60).unwrap().unwrap();
        sweep(&m);
        assert_eq!(m.since_mark(dead, 300).unwrap(), SinceMark::Sweeping);
        assert_eq!(m.sweeps_begun(), 3);
    }
}
