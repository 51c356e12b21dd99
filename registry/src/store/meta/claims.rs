//! Push claims (SPEC.md §7.4): at most one client publishes to a volume
//! at a time, so two pushes never race on its tags. A claim is a lease:
//! the holder renews it, and a crashed holder's claim lapses after its
//! time to live. A holder that asks again (its first answer lost) gets its
//! own claim back rather than a refusal naming itself. Claims are rows of
//! the metadata store, so every replica sharing it sees them and a restart
//! keeps them. Only a caller allowed to push may claim, renew or release
//! (`access::need`); lapsed claims are pruned whenever one is taken, and a
//! holder's name is bounded, so the table stays as small as the pushes in
//! flight.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::store::meta::db::MetaStore;
use crate::store::meta::engine::{Bytes, ReadableTable, WriteTransaction};
use crate::store::meta::error::{MetaError, Result};
use crate::store::meta::schema::CLAIMS;

/// The live claim on `repo` at `now`, in a read transaction.
pub(crate) fn live(
    tx: &crate::store::meta::engine::ReadTransaction,
    repo: &str,
    now: u64,
) -> std::result::Result<Option<Claim>, MetaError> {
    live_claim(&tx.open_table(CLAIMS)?, repo, now)
}

fn live_claim(
    t: &impl ReadableTable<Bytes>,
    repo: &str,
    now: u64,
) -> std::result::Result<Option<Claim>, MetaError> {
    Ok(match t.get(repo)? {
        Some(v) => Some(serde_json::from_slice::<Claim>(v.value())?).filter(|c| c.expires_at > now),
        None => None,
    })
}

/// The live claim on `repo` at `now`, in a write transaction.
pub(crate) fn live_in(
    tx: &WriteTransaction,
    repo: &str,
    now: u64,
) -> std::result::Result<Option<Claim>, MetaError> {
    live_claim(&tx.open_table(CLAIMS)?, repo, now)
}

/// Removes the claim on `repo` if `token` holds it, in a write
/// transaction; whether it did.
pub(crate) fn release_in(
    tx: &WriteTransaction,
    repo: &str,
    token: &str,
) -> std::result::Result<bool, MetaError> {
    let mut t = tx.open_table(CLAIMS)?;
    let mine = match t.get(repo)? {
        Some(v) => serde_json::from_slice::<Claim>(v.value())?.token == token,
        None => false,
    };
    if mine {
        t.remove(repo)?;
    }
    Ok(mine)
}

/// A claim as the registry holds it; the API shows it as
/// [`sealvol_spec::api::Claim`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub token: String,
    pub holder: String,
    /// Unix seconds.
    pub expires_at: u64,
}

/// Longest holder name kept (a host and a process, say).
pub const MAX_HOLDER_LEN: usize = 256;

/// What taking a claim does when a live claim of the same holder is
/// found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SameHolder {
    /// Gives it back renewed: the holder asked again because it never
    /// got the first answer (a retried request).
    Renew,
    /// Refuses, as any other holder: the GC lease, whose holder names a
    /// replica, not one pass (a restarted replica must not inherit the
    /// lease of a pass its earlier process left behind).
    Refuse,
}

impl MetaStore {
    /// Takes the claim on `repo`, or answers the live claim that holds it.
    /// A live claim of the same `holder` is given back, renewed, with its
    /// token: a client whose request was answered but whose answer was
    /// lost asks again, and must not be refused by its own claim.
    pub fn acquire_claim(
        &self,
        repo: &str,
        holder: &str,
        now: u64,
        ttl: u64,
    ) -> Result<std::result::Result<Claim, Claim>> {
        let token = uuid::Uuid::new_v4().to_string();
        self.take_claim(repo, holder, &token, now, ttl, SameHolder::Renew)
    }

    /// Takes the claim on `repo` under `token` (chosen by the caller, who
    /// may need to know it before the claim is visible to others).
    pub(crate) fn take_claim(
        &self,
        repo: &str,
        holder: &str,
        token: &str,
        now: u64,
        ttl: u64,
        same_holder: SameHolder,
    ) -> Result<std::result::Result<Claim, Claim>> {
        let holder = bounded(holder);
        let tx = self.db.begin_write()?;
        let answer = {
            let mut t = tx.open_table(CLAIMS)?;
            let mut lapsed = Vec::new();
            let mut live = None;
            for row in t.iter()? {
                let (k, v) = row?;
                let c: Claim = serde_json::from_slice(v.value())?;
                if c.expires_at <= now {
                    lapsed.push(k.value().to_string());
                } else if k.value() == repo {
                    live = Some(c);
                }
            }
            for k in lapsed {
                t.remove(&k)?;
            }
            match live {
                Some(mut mine) if mine.holder == holder && same_holder == SameHolder::Renew => {
                    mine.expires_at = mine.expires_at.max(now + ttl);
                    t.insert(repo, serde_json::to_vec(&mine)?.as_slice())?;
                    Ok(mine)
                }
                Some(held) => Err(held),
                None => {
                    let claim = Claim {
                        token: token.to_string(),
                        holder,
                        expires_at: now + ttl,
                    };
                    t.insert(repo, serde_json::to_vec(&claim)?.as_slice())?;
                    Ok(claim)
                }
            }
        };
        tx.commit()?;
        Ok(answer)
    }

    /// Extends a live claim; `None` when it lapsed or was never held.
    pub fn renew_claim(
        &self,
        repo: &str,
        token: &str,
        now: u64,
        ttl: u64,
    ) -> Result<Option<Claim>> {
        let tx = self.db.begin_write()?;
        let renewed = {
            let mut t = tx.open_table(CLAIMS)?;
            let held: Option<Claim> = match t.get(repo)? {
                Some(v) => Some(serde_json::from_slice(v.value())?),
                None => None,
            };
            match held.filter(|c| c.token == token && c.expires_at > now) {
                Some(mut c) => {
                    c.expires_at = now + ttl;
                    t.insert(repo, serde_json::to_vec(&c)?.as_slice())?;
                    Some(c)
                }
                None => None,
            }
        };
        tx.commit()?;
        Ok(renewed)
    }

    pub fn release_claim(&self, repo: &str, token: &str) -> Result<()> {
        let tx = self.db.begin_write()?;
        release_in(&tx, repo, token)?;
        tx.commit()?;
        Ok(())
    }

    /// The volumes a live claim holds at `now`.
    pub fn claimed(&self, now: u64) -> Result<HashSet<String>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(CLAIMS)?;
        let mut out = HashSet::new();
        for row in t.iter()? {
            let (k, v) = row?;
            if serde_json::from_slice::<Claim>(v.value())?.expires_at > now {
                out.insert(k.value().to_string());
            }
        }
        Ok(out)
    }

    /// How many claims are stored, lapsed or not (tests).
    #[cfg(test)]
    fn claim_rows(&self) -> usize {
        let tx = self.db.begin_read().unwrap();
        let n = tx.open_table(CLAIMS).unwrap().len().unwrap();
        n as usize
    }
}

/// `holder` cut to [`MAX_HOLDER_LEN`] bytes at a character boundary (the
/// handler refuses longer ones; this keeps the bound for other callers).
fn bounded(holder: &str) -> String {
    let mut end = holder.len().min(MAX_HOLDER_LEN);
    while !holder.is_char_boundary(end) {
        end -= 1;
    }
    holder[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, MetaStore) {
        MetaStore::temporary()
    }

    #[test]
    fn one_holder_at_a_time_until_release_or_lapse() {
        let (_dir, claims) = store();
        let is_claimed = |now| claims.claimed(now).unwrap().contains("ns/v");
        let a = claims.acquire_claim("ns/v", "a", 100, 60).unwrap().unwrap();
        assert_eq!(
            claims
                .acquire_claim("ns/v", "b", 120, 60)
                .unwrap()
                .unwrap_err()
                .holder,
            "a"
        );
        assert!(claims
            .acquire_claim("ns/other", "b", 120, 60)
            .unwrap()
            .is_ok());
        assert!(claims
            .renew_claim("ns/v", &a.token, 150, 60)
            .unwrap()
            .is_some());
        // Renewed at 150: still held at 200, lapsed at 210.
        assert!(claims.acquire_claim("ns/v", "b", 200, 60).unwrap().is_err());
        assert!(claims
            .renew_claim("ns/v", "not-the-token", 200, 60)
            .unwrap()
            .is_none());
        let b = claims.acquire_claim("ns/v", "b", 210, 60).unwrap().unwrap();
        assert!(claims
            .renew_claim("ns/v", &a.token, 211, 60)
            .unwrap()
            .is_none());
        claims.release_claim("ns/v", &a.token).unwrap(); // not a's any more
        assert!(is_claimed(211));
        claims.release_claim("ns/v", &b.token).unwrap();
        assert!(!is_claimed(211));
    }

    /// A client whose claim was taken but whose answer was lost asks
    /// again with the same holder (issue 28): it gets its own claim back,
    /// renewed, instead of "another push in progress" naming itself.
    #[test]
    fn the_same_holder_asking_again_gets_its_claim_back() {
        let (_dir, claims) = store();
        let holder = "sealvol push host pid 7 push 1f2e";
        let first = claims
            .acquire_claim("ns/v", holder, 100, 60)
            .unwrap()
            .unwrap();
        let again = claims.acquire_claim("ns/v", holder, 130, 60).unwrap();
        assert_eq!(
            again,
            Ok(Claim {
                token: first.token.clone(),
                holder: holder.to_string(),
                expires_at: 190,
            })
        );
        // Still one claim: another holder is refused, and the token works.
        let other = claims.acquire_claim("ns/v", "sealvol push host pid 7 push 9a0b", 150, 60);
        assert_eq!(other.unwrap().unwrap_err().token, first.token);
        assert!(claims
            .renew_claim("ns/v", &first.token, 189, 60)
            .unwrap()
            .is_some());
        // Bounded holders compare as stored.
        let long = "h".repeat(2 * MAX_HOLDER_LEN);
        let a = claims
            .acquire_claim("ns/w", &long, 100, 60)
            .unwrap()
            .unwrap();
        let b = claims
            .acquire_claim("ns/w", &long, 101, 60)
            .unwrap()
            .unwrap();
        assert_eq!(a.token, b.token);
        // The GC lease refuses its own holder: a replica's earlier pass is
        // not this one.
        let t = claims
            .take_claim("\0gc", "replica", "t1", 100, 60, SameHolder::Refuse)
            .unwrap();
        assert!(t.is_ok());
        let again = claims
            .take_claim("\0gc", "replica", "t2", 101, 60, SameHolder::Refuse)
            .unwrap();
        assert_eq!(again.unwrap_err().token, "t1");
    }

    #[test]
    fn lapsed_claims_are_pruned_and_holders_bounded() {
        let (_dir, claims) = store();
        for i in 0..100 {
            claims
                .acquire_claim(&format!("ns/v{i}"), "a", 100, 60)
                .unwrap()
                .unwrap();
        }
        assert_eq!(claims.claim_rows(), 100);
        let c = claims
            .acquire_claim("ns/w", &"é".repeat(1000), 200, 60)
            .unwrap()
            .unwrap();
        assert_eq!(claims.claim_rows(), 1);
        assert!(c.holder.len() <= MAX_HOLDER_LEN && c.holder.starts_with('é'));
    }
}
