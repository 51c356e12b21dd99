//! Push claims (SPEC.md §7.4): at most one client publishes to a volume
//! at a time, so two pushes never race on its tags. A claim is a lease:
//! the holder renews it, and a crashed holder's claim lapses after its
//! time to live. Claims live in memory: a restarted registry has no
//! pushes in flight that it could protect.

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

#[derive(Debug, Default)]
pub struct Claims {
    held: Mutex<HashMap<String, Claim>>,
}

impl Claims {
    /// Takes the claim on `repo`, or answers the live claim that holds it.
    pub fn acquire(&self, repo: &str, holder: &str, now: u64, ttl: u64) -> Result<Claim, Claim> {
        let mut held = self.held.lock().expect("claims lock");
        if let Some(c) = held.get(repo).filter(|c| c.expires_at > now) {
            return Err(c.clone());
        }
        let claim = Claim {
            token: uuid::Uuid::new_v4().to_string(),
            holder: holder.to_string(),
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
}
