//! API keys as `/api/v1/keys` lists, creates and revokes them (SPEC.md
//! §7.5); the rows are `store::meta::keys`'.

use sealvol_spec::api;

use crate::error::{RegistryError, Result};
use crate::state::app::App;
use crate::store::meta::keys::KeySecret;

pub(crate) async fn list(app: &App) -> Result<Vec<api::ApiKey>> {
    app.meta(|m| m.keys()).await
}

/// A new key as `request` asks, created by `by`, expiring at `expires`:
/// the answer holds its secret, once.
pub(crate) async fn create(
    app: &App,
    request: api::ApiKeyRequest,
    expires: Option<u64>,
    by: String,
) -> Result<api::NewApiKey> {
    let now = app.now();
    let sealing = (app.syncs.key.get().cloned())
        .ok_or_else(|| RegistryError::Internal("the registry has no secrets key".into()))?;
    app.meta(move |m| m.create_key(&request, expires, &by, now, &sealing))
        .await
}

pub(crate) async fn revoke(app: &App, id: String) -> Result<()> {
    app.meta(move |m| m.delete_key(&id)).await
}

/// What an AWS signature made with API key `id` is checked with (SPEC.md
/// §10.3).
pub(crate) enum Signer {
    /// The key's secret.
    Secret(String),
    /// The key was made before the registry kept its secret sealed.
    NotKept,
    /// No such key, or it has expired.
    Unknown,
}

/// The secret of key `id`, opened for checking a signature and nothing
/// else.
pub(crate) async fn signer(app: &App, id: &str) -> Result<Signer> {
    let sealing = (app.syncs.key.get().cloned())
        .ok_or_else(|| RegistryError::Internal("the registry has no secrets key".into()))?;
    let (id, now) = (id.to_string(), crate::auth::unix_now());
    let found = app.meta(move |m| m.key_secret(&id, now, &sealing)).await?;
    Ok(match found {
        Some(KeySecret::Secret(s)) => Signer::Secret(s),
        Some(KeySecret::NotKept) => Signer::NotKept,
        None => Signer::Unknown,
    })
}
