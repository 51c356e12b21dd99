//! API keys on a registry (SPEC.md §7.5): create one scoped to repository
//! globs and actions (its secret is shown once), list them, revoke one.
//! Only admins may; a key logs in as user `id` with password `secret`.

use reqwest::Method;
use sealvol_spec::api::{ApiKey, ApiKeyList, ApiKeyRequest, ErrorCode, NewApiKey};

use crate::api::{self, CallCtx};
use crate::remote::Remote;
use crate::Error;

struct Ctx {
    registry: String,
    doing: &'static str,
    id: String,
}

impl CallCtx for Ctx {
    const SPEC: &'static str = "§7.5";
    type Error = Error;

    fn registry(&self) -> &str {
        &self.registry
    }

    fn call(&self) -> String {
        self.doing.to_string()
    }

    fn refused(&self, status: u16, body: &[u8]) -> Error {
        let (code, message) = api::error_code(body);
        let registry = &self.registry;
        match ErrorCode::parse(&code) {
            Some(ErrorCode::KeyUnknown) => Error::NotFound(format!(
                "API key {} not found on registry {registry}",
                self.id
            )),
            Some(ErrorCode::Invalid) => Error::Usage(format!(
                "registry {registry} refused {}: {}",
                self.doing,
                api::one_line(&message)
            )),
            _ => Error::Transport(api::other_failure(
                registry, status, &code, &message, self.doing,
            )),
        }
    }
}

async fn ctx(remote: &Remote, doing: &'static str, id: &str) -> Result<Ctx, Error> {
    api::require(remote, "API keys").await?;
    Ok(Ctx {
        registry: remote.registry().to_string(),
        doing,
        id: id.to_string(),
    })
}

/// `POST /api/v1/keys`.
pub async fn create(remote: &Remote, req: &ApiKeyRequest) -> Result<NewApiKey, Error> {
    let ctx = ctx(remote, "creating an API key", "").await?;
    let body = api::to_body(req);
    let bytes = api::send(remote, &ctx, Method::POST, "/keys", None, Some(&body)).await?;
    api::decode(&ctx, &bytes)
}

/// `GET /api/v1/keys`.
pub async fn list(remote: &Remote) -> Result<Vec<ApiKey>, Error> {
    let ctx = ctx(remote, "listing API keys", "").await?;
    let list: ApiKeyList = api::get(remote, &ctx, "/keys", None).await?;
    Ok(list.keys)
}

/// `DELETE /api/v1/keys/ID`.
pub async fn revoke(remote: &Remote, id: &str) -> Result<(), Error> {
    let ctx = ctx(remote, "revoking an API key", id).await?;
    let path = format!("/keys/{}", api::segment(id));
    api::send(remote, &ctx, Method::DELETE, &path, None, None).await?;
    Ok(())
}
