//! Push claims (SPEC.md §7.4): at most one client publishes to a volume
//! at a time, so two pushes never race on its tags. A claim is a lease:
//! the holder renews it, and a crashed holder's claim lapses after its
//! time to live. Claims live in memory: a restarted registry has no
//! pushes in flight that it could protect. Only a caller allowed to push
//! may claim, renew or release (`access::need`); lapsed claims are pruned
//! whenever one is taken, and a holder's name is bounded, so the table
//! stays as small as the pushes in flight.

use std::collections::HashMap;
use std::sync::Mutex;

/// A claim as the registry holds it; the API shows it as
/// [`sealvol_spec::api::Claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub token: String,
    pub holder: String,
    /// Unix seconds.
    pub expires_at: u64,
}

/// Longest holder name kept (a host and a process, say).
pub const MAX_HOLDER_LEN: usize = 256;

#[derive(Debug, Default)]
pub struct Claims {
    held: Mutex<HashMap<String, Claim>>,
}

impl Claims {
    /// Takes the claim on `repo`, or answers the live claim that holds it.
    pub fn acquire(&self, repo: &str, holder: &str, now: u64, ttl: u64) -> Result<Claim, Claim> {
        let mut held = self.held.lock().expect("claims lock");
        held.retain(|_, c| c.expires_at > now);
        if let Some(c) = held.get(repo) {
            return Err(c.clone());
        }
        let claim = Claim {
            token: uuid::Uuid::new_v4().to_string(),
            holder: bounded(holder),
            expires_at: now + ttl,
        };
        held.insert(repo.to_string(), claim.clone());
        Ok(claim)
    }

    /// Extends a live claim; `None` when it lapsed or was never held.
    pub fn renew(&self, repo: &str, token: &str, now: u64, ttl: u64) -> Option<Claim> {
        let mut held = self.held.lock().expect("claims lock");
        let c = held
            .get_mut(repo)
            .filter(|c| c.token == token && c.expires_at > now)?;
        c.expires_at = now + ttl;
        Some(c.clone())
    }

    pub fn release(&self, repo: &str, token: &str) {
        let mut held = self.held.lock().expect("claims lock");
        if held.get(repo).is_some_and(|c| c.token == token) {
            held.remove(repo);
        }
    }

    pub fn is_claimed(&self, repo: &str, now: u64) -> bool {
        let held = self.held.lock().expect("claims lock");
        held.get(repo).is_some_and(|c| c.expires_at > now)
    }

    /// How many claims are held, lapsed or not (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.lock().expect("claims lock").len()
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

    #[test]
    fn one_holder_at_a_time_until_release_or_lapse() {
        let claims = Claims::default();
        let a = claims.acquire("ns/v", "a", 100, 60).unwrap();
        assert_eq!(
            claims.acquire("ns/v", "b", 120, 60).unwrap_err().holder,
            "a"
        );
        assert!(claims.acquire("ns/other", "b", 120, 60).is_ok());
        assert!(claims.renew("ns/v", &a.token, 150, 60).is_some());
        // Renewed at 150: still held at 200, lapsed at 210.
        assert!(claims.acquire("ns/v", "b", 200, 60).is_err());
        assert!(claims.renew("ns/v", "not-the-token", 200, 60).is_none());
        let b = claims.acquire("ns/v", "b", 210, 60).unwrap();
        assert!(claims.renew("ns/v", &a.token, 211, 60).is_none());
        claims.release("ns/v", &a.token); // not a's any more: no effect
        assert!(claims.is_claimed("ns/v", 211));
        claims.release("ns/v", &b.token);
        assert!(!claims.is_claimed("ns/v", 211));
    }

    #[test]
    fn lapsed_claims_are_pruned_and_holders_bounded() {
        let claims = Claims::default();
        for i in 0..100 {
            claims.acquire(&format!("ns/v{i}"), "a", 100, 60).unwrap();
        }
        assert_eq!(claims.len(), 100);
        let c = claims.acquire("ns/w", &"é".repeat(1000), 200, 60).unwrap();
        assert_eq!(claims.len(), 1);
        assert!(c.holder.len() <= MAX_HOLDER_LEN && c.holder.starts_with('é'));
    }
}
