//! Push claims (SPEC.md §7.4): the lock a push takes on its volume so two
//! pushes cannot move its tags at once, taken, renewed in the background
//! for as long as the push runs, and given back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use sealvol_spec::api::{self as wire, Claim, ErrorCode};
use sealvol_spec::reference::{Selector, VolumeRef};

use crate::api::{decode, require, segment, send, supported, to_body};
use crate::remote::Remote;
use crate::resolve::display_ref;
use crate::volumes::{volume_path, Ctx, Failed, Op};
use crate::{Error, TransportError};

/// `POST /api/v1/volumes/NAME/-/claim`: takes the volume's push claim, or
/// fails with "another push to REF is in progress; push again".
pub async fn claim_acquire(
    remote: &Remote,
    volume: &VolumeRef,
    holder: &str,
) -> Result<Claim, Error> {
    Ok(claim_call(remote, volume, Method::POST, None, Some(holder)).await?)
}

/// `PUT /api/v1/volumes/NAME/-/claim/TOKEN`: renews a claim. One that
/// lapsed is an [`Error::Conflict`] saying so.
pub async fn claim_renew(remote: &Remote, volume: &VolumeRef, token: &str) -> Result<Claim, Error> {
    Ok(claim_call(remote, volume, Method::PUT, Some(token), None).await?)
}

/// `DELETE /api/v1/volumes/NAME/-/claim/TOKEN`; a claim already gone is
/// released too.
pub async fn claim_release(remote: &Remote, volume: &VolumeRef, token: &str) -> Result<(), Error> {
    let info = require(remote, Op::Claim.what()).await?;
    let ctx = Ctx::volume(remote, Op::Claim, &info, volume);
    let path = format!("{}/-/claim/{}", volume_path(volume), segment(token));
    match send(
        remote,
        &ctx,
        Method::DELETE,
        &path,
        Some(&volume.repository()),
        None,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(f) if f.code == Some(ErrorCode::ClaimUnknown) => Ok(()),
        Err(f) => Err(f.into()),
    }
}

/// Acquires (no `token`) or renews (`token`) a claim, keeping the error
/// code for [`PushClaim`]'s renewer.
async fn claim_call(
    remote: &Remote,
    volume: &VolumeRef,
    method: Method,
    token: Option<&str>,
    holder: Option<&str>,
) -> Result<Claim, Failed> {
    let info = require(remote, Op::Claim.what())
        .await
        .map_err(Failed::from)?;
    let ctx = Ctx::volume(remote, Op::Claim, &info, volume);
    let mut path = format!("{}/-/claim", volume_path(volume));
    if let Some(t) = token {
        path.push('/');
        path.push_str(&segment(t));
    }
    let body = holder.map(|h| {
        to_body(&wire::ClaimRequest {
            holder: h.to_string(),
        })
    });
    let bytes = send(
        remote,
        &ctx,
        method,
        &path,
        Some(&volume.repository()),
        body.as_ref(),
    )
    .await?;
    decode(&ctx, &bytes).map_err(Failed::from)
}

/// How long [`PushClaim::release`] keeps asking a registry that is away.
const RELEASE_TIME: Duration = Duration::from_secs(10);

/// A push claim held for as long as a push runs: renewed every third of
/// its lifetime in the background, released by [`PushClaim::release`].
/// Dropped without a release (a push cancelled), it stops renewing and
/// lapses on its own.
pub struct PushClaim {
    remote: Remote,
    volume: VolumeRef,
    state: Arc<Mutex<ClaimState>>,
    renewer: tokio::task::JoinHandle<()>,
}

struct ClaimState {
    token: String,
    /// Set when the claim lapsed and another push took the volume.
    lost: Option<String>,
}

/// What a push claim's holder says: `sealvol push <host> pid <pid> push
/// <random>`. The registry gives a claim back to its own holder when asked
/// again (a request retried after its answer was lost, SPEC.md §7.4), so a
/// holder names one push, not a process: two pushes of one process, or
/// two containers with the same host name each running as pid 1, must not
/// share a claim. Make one per push and keep it for that push.
pub fn push_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into());
    format!(
        "sealvol push {host} pid {} push {:012x}",
        std::process::id(),
        random_48()
    )
}

/// 48 random bits: std's `RandomState` is keyed from the OS's randomness
/// once per thread and differs for each instance after, which is all a
/// holder needs (no dependency for it).
fn random_48() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.finish() & 0xffff_ffff_ffff
}

/// Takes `volume`'s push claim and keeps it renewed; `None` on a registry
/// without the volume API (SPEC.md §7.4: such a push takes no claim).
pub async fn hold_push_claim(
    remote: &Remote,
    volume: &VolumeRef,
    holder: &str,
) -> Result<Option<PushClaim>, Error> {
    if !supported(remote).await? {
        tracing::debug!(
            registry = remote.registry(),
            "no volume API: pushing without a claim"
        );
        return Ok(None);
    }
    let claim = claim_acquire(remote, volume, holder).await?;
    let every = renew_interval(claim.ttl_seconds);
    let state = Arc::new(Mutex::new(ClaimState {
        token: claim.token,
        lost: None,
    }));
    let renewer = tokio::spawn(renew_loop(
        remote.clone(),
        volume.clone(),
        holder.to_string(),
        state.clone(),
        every,
    ));
    Ok(Some(PushClaim {
        remote: remote.clone(),
        volume: volume.clone(),
        state,
        renewer,
    }))
}

/// A third of the claim's lifetime, so two renewals may fail in a row.
fn renew_interval(ttl_seconds: u64) -> Duration {
    Duration::from_secs(ttl_seconds.max(3)) / 3
}

async fn renew_loop(
    remote: Remote,
    volume: VolumeRef,
    holder: String,
    state: Arc<Mutex<ClaimState>>,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        let token = state.lock().expect("claim state").token.clone();
        match claim_call(&remote, &volume, Method::PUT, Some(&token), None).await {
            Ok(_) => {}
            // It lapsed (the process was stopped, the network was away):
            // take it again unless another push has it now.
            Err(f) if f.code == Some(ErrorCode::ClaimUnknown) => {
                tracing::warn!("the push claim lapsed; taking it again");
                match claim_acquire(&remote, &volume, &holder).await {
                    Ok(c) => state.lock().expect("claim state").token = c.token,
                    Err(e) => {
                        state.lock().expect("claim state").lost = Some(e.to_string());
                        return;
                    }
                }
            }
            Err(f) => {
                tracing::debug!(error = %f.error, "renewing the push claim; trying again later")
            }
        }
    }
}

impl PushClaim {
    /// An error once the claim lapsed and could not be taken again:
    /// another push now owns the volume, and this one must not move tags.
    pub fn check(&self) -> Result<(), Error> {
        match &self.state.lock().expect("claim state").lost {
            None => Ok(()),
            Some(why) => Err(Error::Conflict(format!(
                "the push claim on {} lapsed and could not be taken again ({why}); push again",
                display_ref(&self.remote, &self.volume.with_selector(Selector::Head))
            ))),
        }
    }

    /// Stops renewing and gives the claim back. A registry that is away
    /// (restarting: connection refused, which the transport does not
    /// retry) is asked again for a few seconds, since a claim left behind
    /// refuses the volume's next push until it lapses. A failure is not
    /// returned, the push itself being done, but said as a warning.
    pub async fn release(self) {
        self.release_within(RELEASE_TIME).await
    }

    async fn release_within(self, limit: Duration) {
        self.renewer.abort();
        let token = self.state.lock().expect("claim state").token.clone();
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(250);
        loop {
            let e = match claim_release(&self.remote, &self.volume, &token).await {
                Ok(()) => return,
                Err(e) => e,
            };
            let passing = matches!(
                e,
                Error::Transport(
                    TransportError::Unreachable { .. } | TransportError::Registry { .. }
                )
            );
            if !passing || started.elapsed() + pause > limit {
                tracing::warn!(
                    "could not release the push claim on {} ({e}); the next push to it is refused until the claim lapses",
                    display_ref(&self.remote, &self.volume.with_selector(Selector::Head))
                );
                return;
            }
            tracing::debug!(error = %e, "releasing the push claim; trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

impl Drop for PushClaim {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::api::{ApiInfo, API};
    use serde_json::json;

    /// The registry gives a claim back to its own holder (a retried
    /// request), so each push must name itself apart from every other,
    /// even in one process.
    #[test]
    fn each_push_has_a_holder_of_its_own() {
        let (a, b) = (push_holder(), push_holder());
        assert_ne!(a, b);
        let pid = format!(" pid {} push ", std::process::id());
        assert!(a.starts_with("sealvol push ") && a.contains(&pid), "{a}");
    }

    #[test]
    fn claims_are_renewed_three_times_a_lifetime() {
        // The answers themselves are sealvol_spec::api's, tested there.
        let info: ApiInfo = serde_json::from_value(json!({"api": API})).unwrap();
        assert_eq!(
            renew_interval(info.claim_ttl_seconds),
            Duration::from_secs(20)
        );
        assert_eq!(renew_interval(0), Duration::from_secs(1));
    }
}
