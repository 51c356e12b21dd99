//! Push claims as the volume API takes, renews and releases them
//! (SPEC.md §7.3); the rows are `store::meta::claims`'.

use sealvol_spec::api;

use crate::clock::rfc3339;
use crate::error::{Code, RegistryError, Result};
use crate::state::app::App;
use crate::store::meta::claims::{Claim, MAX_HOLDER_LEN};

/// `POST …/-/claim`: the claim on `name` for `holder`, or
/// `PUSH_IN_PROGRESS` naming who holds it.
pub(crate) async fn acquire(app: &App, name: &str, holder: &str) -> Result<api::Claim> {
    if holder.len() > MAX_HOLDER_LEN {
        return Err(RegistryError::new(
            Code::Invalid,
            format!("holder is longer than {MAX_HOLDER_LEN} bytes"),
        ));
    }
    let (ttl, now) = (app.lifetimes.claim_ttl_seconds, app.now());
    let (repo, h) = (name.to_string(), holder.to_string());
    let taken = app
        .meta(move |m| m.acquire_claim(&repo, &h, now, ttl))
        .await?;
    match taken {
        Ok(c) => Ok(claim_view(c, ttl)),
        Err(held) => Err(RegistryError::new(
            Code::PushInProgress,
            format!(
                "another push to {name} is in progress ({}, until {}); push again",
                if held.holder.is_empty() {
                    "unnamed client"
                } else {
                    held.holder.as_str()
                },
                rfc3339(held.expires_at)
            ),
        )),
    }
}

/// `PUT …/-/claim/TOKEN`: the claim renewed, or `CLAIM_UNKNOWN`.
pub(crate) async fn renew(app: &App, name: &str, token: &str) -> Result<api::Claim> {
    let (ttl, now) = (app.lifetimes.claim_ttl_seconds, app.now());
    let (repo, t) = (name.to_string(), token.to_string());
    let renewed = app
        .meta(move |m| m.renew_claim(&repo, &t, now, ttl))
        .await?;
    match renewed {
        Some(c) => Ok(claim_view(c, ttl)),
        None => Err(RegistryError::new(
            Code::ClaimUnknown,
            format!("the push claim on {name} lapsed or was never held"),
        )),
    }
}

/// `DELETE …/-/claim/TOKEN`.
pub(crate) async fn release(app: &App, name: &str, token: String) -> Result<()> {
    let repo = name.to_string();
    app.meta(move |m| m.release_claim(&repo, &token)).await?;
    Ok(())
}

fn claim_view(c: Claim, ttl: u64) -> api::Claim {
    api::Claim {
        token: c.token,
        holder: c.holder,
        expires_at: Some(rfc3339(c.expires_at)),
        ttl_seconds: ttl,
    }
}
