//! What every replica sharing a metadata store knows of garbage
//! collection (SPEC.md §7.4), so that a pass on one replica is safe while
//! the others serve:
//!
//! - **One pass at a time, store-wide**: a pass holds the GC lease, a push
//!   claim ([`crate::store::meta::claims`]) on a name no volume can have, renewed while
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
//!   manifest, then reads it again (`service::links::settle`): unchanged and even,
//!   no sweep can have deleted those bytes, and every later one sees the
//!   link. Otherwise it waits for that sweep to end and checks that the
//!   bytes are still there (a bucket listing cannot tell bytes put a
//!   moment ago from bytes put long ago when the digest was stored before).
//!
//! Within one process the sweep also holds [`crate::state::app::App::sweep`] exclusively, so
//! the requests of its own replica wait instead of checking afterwards.
//!
//! **Lock order.** A request that holds [`crate::state::app::App::sweep`] shared may wait in
//! `service::links::settle` for a sweep to end, so that sweep must never need the
//! lock. It cannot, because a sweep is in progress only under the lease
//! that began it (`begin_sweep` records the lease's token beside the odd
//! number): a pass that merely holds the lease, marking or waiting for the
//! lock itself, makes nobody wait. (When any live lease counted, writes
//! waiting on a dead pass's odd number went on waiting once a new pass
//! took the lease, holding the lock that pass waited for, until its lease
//! lapsed too: 119 s.) This replica's own sweeps hold the lock
//! exclusively, so a request holding it shared only ever waits for
//! another replica's sweep, which needs nothing of this process.
//!
//! **Dead passes.** A pass whose process was killed leaves the lease and
//! an odd number behind. The lease names its replica (the `replica-id` in
//! the data folder, as sync jobs' leases do), and this process knows the
//! leases it holds (`service::links::HELD_HERE`): a lease of this replica that this
//! process does not hold was left by an earlier process, so a restarted
//! replica ends it as soon as a request or a pass meets it (the lease goes,
//! the number becomes even) instead of making every write wait until it
//! lapses. Another replica's dead pass is over when its lease lapses.

use crate::store::meta::claims::Claim;
use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::{ReadableTable, Str, WriteTransaction, U64};
use crate::store::meta::error::MetaError;
use crate::store::meta::schema::{GC_SWEEPERS, GC_SWEEPS};

/// The one key of [`GC_SWEEPS`] and [`GC_SWEEPERS`].
const SWEEPS: &str = "sweeps";
/// The push claim that is the GC lease: NUL is in no volume name.
pub(crate) const GC_CLAIM: &str = "\0gc";

/// How long a pass's lease lasts unless renewed (at each step of the
/// pass once a tenth of it went by).
pub const GC_LEASE_SECONDS: u64 = 60;

fn sequence(t: &impl ReadableTable<U64>) -> std::result::Result<u64, MetaError> {
    Ok(t.get(SWEEPS)?.map_or(0, |v| v.value()))
}

/// The token of the lease sweep `n` began under, if recorded.
fn owner(t: &impl ReadableTable<Str>, n: u64) -> std::result::Result<Option<String>, MetaError> {
    let Some(v) = t.get(SWEEPS)? else {
        return Ok(None);
    };
    Ok(match v.value().split_once(' ') {
        Some((m, token)) if m.parse() == Ok(n) => Some(token.to_string()),
        _ => None,
    })
}

/// The live lease an odd sweep runs under: the one that began it (or,
/// for a sweep an earlier release began without recording it, any).
fn sweeper(lease: Option<Claim>, owner: Option<String>) -> Option<Claim> {
    lease.filter(|l| owner.is_none_or(|o| o == l.token))
}

/// The sweep sequence when a request began to rely on blob bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepMark(u64);

/// What became of a [`SweepMark`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinceMark {
    /// No sweep began or ended since: nothing was deleted meanwhile.
    Untouched,
    /// A sweep is deleting bytes now, under this lease.
    Sweeping(Claim),
    /// A sweep ran since, or was running when the mark was read and is
    /// over (or its replica died): the bytes need a look.
    Swept,
}

impl MetaStore {
    /// Reads the sweep sequence: call before relying on blob bytes.
    pub fn sweep_mark(&self) -> crate::store::meta::error::Result<SweepMark> {
        let tx = self.db.begin_read()?;
        Ok(SweepMark(sequence(&tx.open_table(GC_SWEEPS)?)?))
    }

    /// What happened since `mark`, at `now`.
    pub fn since_mark(
        &self,
        mark: SweepMark,
        now: u64,
    ) -> crate::store::meta::error::Result<SinceMark> {
        let tx = self.db.begin_read()?;
        let n = sequence(&tx.open_table(GC_SWEEPS)?)?;
        if n == mark.0 && n % 2 == 0 {
            return Ok(SinceMark::Untouched);
        }
        if n % 2 == 1 {
            let lease = crate::store::meta::claims::live(&tx, GC_CLAIM, now)?;
            if let Some(l) = sweeper(lease, owner(&tx.open_table(GC_SWEEPERS)?, n)?) {
                return Ok(SinceMark::Sweeping(l));
            }
        }
        // Odd under no live lease: that pass deletes nothing any more, but
        // it may have deleted something after the mark was read.
        Ok(SinceMark::Swept)
    }

    /// How many sweeps have begun (tests).
    #[cfg(test)]
    pub(crate) fn sweeps_begun(&self) -> u64 {
        self.sweep_mark().unwrap().0.div_ceil(2)
    }

    /// Makes the sweep sequence even if the sweep under way began under
    /// `lease`: the sweep deletes nothing more. (A pass that outlived its
    /// lease leaves the next pass's sweep alone.)
    pub fn end_sweep(&self, lease: &str) -> crate::store::meta::error::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(GC_SWEEPS)?;
            let n = sequence(&t)?;
            let mine = owner(&tx.open_table(GC_SWEEPERS)?, n)?.is_none_or(|o| o == lease);
            if n % 2 == 1 && mine {
                t.insert(SWEEPS, n + 1)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Ends what a dead pass left: the GC lease, when `replica` holds it
    /// but not under a token `ours` knows (an earlier process of this
    /// replica took it), and an odd sweep sequence whose lease is gone
    /// (that one, or one that lapsed). Whether it ended anything.
    pub(crate) fn end_dead_pass(
        &self,
        replica: &str,
        ours: impl Fn(&str) -> bool,
        now: u64,
    ) -> crate::store::meta::error::Result<bool> {
        let tx = self.db.begin_write()?;
        let mut ended = false;
        if let Some(l) = crate::store::meta::claims::live_in(&tx, GC_CLAIM, now)? {
            if l.holder == replica && !ours(&l.token) {
                ended |= crate::store::meta::claims::release_in(&tx, GC_CLAIM, &l.token)?;
            }
        }
        {
            let mut t = tx.open_table(GC_SWEEPS)?;
            let n = sequence(&t)?;
            if n % 2 == 1 {
                let lease = crate::store::meta::claims::live_in(&tx, GC_CLAIM, now)?;
                if sweeper(lease, owner(&tx.open_table(GC_SWEEPERS)?, n)?).is_none() {
                    t.insert(SWEEPS, n + 1)?;
                    ended = true;
                }
            }
        }
        tx.commit()?;
        Ok(ended)
    }
}

/// Makes the sweep sequence odd, in the transaction that removes links,
/// recording `lease` as the sweep's; one left odd by a pass whose replica
/// died is moved on to the next odd. False, and nothing done, when
/// `lease` is not the live GC lease at `now`: a pass that lost its lease
/// must not begin a sweep another pass's would then look over.
pub(crate) fn begin_sweep(
    tx: &WriteTransaction,
    lease: &str,
    now: u64,
) -> std::result::Result<bool, MetaError> {
    let held = crate::store::meta::claims::live_in(tx, GC_CLAIM, now)?;
    if held.is_none_or(|l| l.token != lease) {
        return Ok(false);
    }
    let mut t = tx.open_table(GC_SWEEPS)?;
    let n = sequence(&t)?;
    let next = if n % 2 == 0 { n + 1 } else { n + 2 };
    t.insert(SWEEPS, next)?;
    tx.open_table(GC_SWEEPERS)?
        .insert(SWEEPS, format!("{next} {lease}").as_str())?;
    Ok(true)
}

/// Leaves what a pass of `holder` that died mid-sweep at `now` leaves:
/// its lease, under a token no process holds, and an odd sequence.
#[cfg(test)]
pub(crate) fn plant_dead_sweep(m: &MetaStore, holder: &str, now: u64) {
    let token = uuid::Uuid::new_v4().to_string();
    m.take_claim(
        GC_CLAIM,
        holder,
        &token,
        now,
        GC_LEASE_SECONDS,
        crate::store::meta::claims::SameHolder::Refuse,
    )
    .unwrap()
    .unwrap();
    let tx = m.db.begin_write().unwrap();
    assert!(begin_sweep(&tx, &token, now).unwrap());
    tx.commit().unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, MetaStore) {
        MetaStore::temporary()
    }

    /// Takes the GC lease as `holder`'s pass would, at `now`: its token.
    fn lease(m: &MetaStore, holder: &str, now: u64) -> String {
        let token = uuid::Uuid::new_v4().to_string();
        m.take_claim(
            GC_CLAIM,
            holder,
            &token,
            now,
            60,
            crate::store::meta::claims::SameHolder::Refuse,
        )
        .unwrap()
        .unwrap();
        token
    }

    fn sweep(m: &MetaStore, lease: &str, now: u64) -> bool {
        let tx = m.db.begin_write().unwrap();
        let begun = begin_sweep(&tx, lease, now).unwrap();
        tx.commit().unwrap();
        begun
    }

    fn sweeping(since: SinceMark) -> Option<String> {
        match since {
            SinceMark::Sweeping(l) => Some(l.token),
            _ => None,
        }
    }

    #[test]
    fn a_mark_tells_whether_a_sweep_overlapped() {
        let (_dir, m) = store();
        let before = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Untouched);

        // A sweep under a live lease: in progress, then over.
        let a = lease(&m, "a", 100);
        assert!(sweep(&m, &a, 100));
        assert_eq!(
            sweeping(m.since_mark(before, 100).unwrap()),
            Some(a.clone())
        );
        let during = m.sweep_mark().unwrap();
        assert_eq!(
            sweeping(m.since_mark(during, 100).unwrap()),
            Some(a.clone())
        );
        m.end_sweep(&a).unwrap();
        assert_eq!(m.since_mark(before, 100).unwrap(), SinceMark::Swept);
        assert_eq!(m.since_mark(during, 100).unwrap(), SinceMark::Swept);
        let after = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 100).unwrap(), SinceMark::Untouched);
        m.release_claim(GC_CLAIM, &a).unwrap();

        // A pass whose replica died mid-sweep: odd, lease lapsed. A mark
        // read meanwhile still looks (the pass deleted until it died).
        let a = lease(&m, "a", 200);
        assert!(sweep(&m, &a, 200));
        let dead = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 300).unwrap(), SinceMark::Swept);
        assert_eq!(m.since_mark(dead, 300).unwrap(), SinceMark::Swept);
        // The next sweep moves on to the next odd number.
        let b = lease(&m, "b", 300);
        assert!(sweep(&m, &b, 300));
        assert_eq!(sweeping(m.since_mark(dead, 300).unwrap()), Some(b));
        assert_eq!(m.sweeps_begun(), 3);
    }

    /// The cause of writes and a pass waiting on each other (issue 28): a
    /// pass that took the lease after a dead pass's lapsed, but has not
    /// begun its own sweep (it waits for the sweep lock the writes hold),
    /// must not count as sweeping the dead pass's odd number.
    #[test]
    fn only_the_lease_that_began_a_sweep_is_sweeping() {
        let (_dir, m) = store();
        let dead = lease(&m, "replica-a", 100);
        assert!(sweep(&m, &dead, 100));
        let mark = m.sweep_mark().unwrap();
        assert!(sweeping(m.since_mark(mark, 100).unwrap()).is_some());

        // The dead lease lapses and the next pass takes one: it marks.
        let next = lease(&m, "replica-b", 161);
        assert_eq!(m.since_mark(mark, 161).unwrap(), SinceMark::Swept);
        // The dead pass, were it only stalled, can neither begin a sweep
        // nor end the next pass's.
        assert!(!sweep(&m, &dead, 161));
        assert!(sweep(&m, &next, 161));
        let during = m.sweep_mark().unwrap();
        m.end_sweep(&dead).unwrap();
        assert_eq!(
            sweeping(m.since_mark(during, 161).unwrap()),
            Some(next.clone())
        );
        m.end_sweep(&next).unwrap();
        assert_eq!(m.since_mark(during, 161).unwrap(), SinceMark::Swept);
    }

    /// A restarted replica ends the pass its earlier process left behind,
    /// lease and odd number, and leaves another replica's live pass alone.
    #[test]
    fn a_replica_ends_its_own_dead_pass_and_no_other() {
        let (_dir, m) = store();
        let none_here = |_: &str| false;
        let dead = lease(&m, "replica-a", 100);
        assert!(sweep(&m, &dead, 100));
        let mark = m.sweep_mark().unwrap();

        // The same replica's live pass (its token known here) stays.
        assert!(!m.end_dead_pass("replica-a", |t| t == dead, 110).unwrap());
        // Another replica leaves it to its lease.
        assert!(!m.end_dead_pass("replica-b", none_here, 110).unwrap());
        assert!(sweeping(m.since_mark(mark, 110).unwrap()).is_some());

        assert!(m.end_dead_pass("replica-a", none_here, 110).unwrap());
        assert_eq!(m.since_mark(mark, 110).unwrap(), SinceMark::Swept);
        let after = m.sweep_mark().unwrap();
        assert_eq!(m.since_mark(after, 110).unwrap(), SinceMark::Untouched);
        assert!(!m.end_dead_pass("replica-a", none_here, 110).unwrap());
        // And the lease is free at once.
        let b = lease(&m, "replica-b", 110);
        m.release_claim(GC_CLAIM, &b).unwrap();

        // Another replica's dead pass: its odd number is made even once
        // its lease lapsed, by any replica.
        let b = lease(&m, "replica-b", 200);
        assert!(sweep(&m, &b, 200));
        assert!(!m.end_dead_pass("replica-a", none_here, 259).unwrap());
        assert!(m.end_dead_pass("replica-a", none_here, 260).unwrap());
        assert_eq!(m.sweep_mark().unwrap().0 % 2, 0);
    }
}
