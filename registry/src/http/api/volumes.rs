//! The volume API (SPEC.md §7.3): JSON under `/api/v1`, beside the OCI
//! API and over the same store. A volume name holds slashes, so the
//! segment `-` separates it from what follows, as GitLab's routes do.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post, put, MethodRouter};
use axum::Router;
use sealvol_spec::api;
use serde::Deserialize;

use crate::auth::Caller;
use crate::clock::rfc3339;
use crate::error::{Code, RegistryError, Result};
use crate::http::query::{flag as query_flag, next_link, param as query_value, Page};
use crate::state::app::App;

use crate::http::extract::MAX_API_BODY as MAX_BODY;

/// The endpoint a path names, for the access table
/// ([`crate::http::access::need`]); the router above serves the same paths.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Root,
    Namespaces,
    Volumes,
    Gc,
    Volume(String),
    Versions(String),
    Version(String, String),
    Restore(String, String),
    Entries(String, String),
    Diff(String, String, String),
    Stats(String),
    Tag(String, String),
    Claim(String),
    ClaimToken(String, String),
    Syncs,
    Sync(String),
    SyncCancel(String),
    Secrets,
    Secret(String),
    Keys,
    Key(String),
    WhoAmI,
}

pub(crate) fn route(path: &str) -> Option<Route> {
    let rest = path.strip_prefix("/api/v1")?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    Some(match rest {
        "" => Route::Root,
        "namespaces" => Route::Namespaces,
        "volumes" => Route::Volumes,
        "gc" => Route::Gc,
        "syncs" => Route::Syncs,
        "secrets" => Route::Secrets,
        "keys" => Route::Keys,
        "whoami" => Route::WhoAmI,
        _ if rest.starts_with("syncs/") => {
            let sub = &rest["syncs/".len()..];
            match sub.split_once('/') {
                None => Route::Sync(sub.to_string()),
                Some((id, "cancel")) => Route::SyncCancel(id.to_string()),
                Some(_) => return None,
            }
        }
        _ if rest.starts_with("keys/") => {
            let id = &rest["keys/".len()..];
            if id.contains('/') {
                return None;
            }
            Route::Key(id.to_string())
        }
        _ if rest.starts_with("secrets/") => {
            let name = &rest["secrets/".len()..];
            if name.contains('/') {
                return None;
            }
            Route::Secret(name.to_string())
        }
        _ => {
            // Decoded as axum decodes the `{*path}` the handler reads, so
            // the access table checks the volume the handler acts on.
            let path = crate::http::query::decode(rest.strip_prefix("volumes/")?);
            let (name, sub) = split_volume_path(&path)?;
            match sub {
                RawSub::Volume => Route::Volume(name),
                RawSub::Versions => Route::Versions(name),
                RawSub::Version(d) => Route::Version(name, d),
                RawSub::Restore(d) => Route::Restore(name, d),
                RawSub::Entries(d) => Route::Entries(name, d),
                RawSub::Diff(a, b) => Route::Diff(name, a, b),
                RawSub::Stats => Route::Stats(name),
                RawSub::Tag(t) => Route::Tag(name, t),
                RawSub::Claim => Route::Claim(name),
                RawSub::ClaimToken(t) => Route::ClaimToken(name, t),
            }
        }
    })
}

fn invalid(why: impl Into<String>) -> RegistryError {
    RegistryError::new(Code::Invalid, why)
}

pub(crate) fn check_volume_name(name: &str) -> Result<()> {
    check_name(name)
}

fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= sealvol_spec::reference::MAX_NAME_LEN
        && name.split('/').count() >= 2
        && name
            .split('/')
            .all(sealvol_spec::reference::is_name_component);
    if ok {
        Ok(())
    } else {
        Err(RegistryError::new(
            Code::NameInvalid,
            format!("invalid volume name {name:?} (namespace/volume)"),
        ))
    }
}

/// A full `b3:<64 hex>` or `sha256:<64 hex>`.
fn check_digest(d: &str) -> Result<()> {
    let ok = if let Some(hex) = d.strip_prefix("b3:") {
        hex.len() == 64
            && hex
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    } else {
        d.parse::<sealvol_spec::Sha256Digest>().is_ok()
    };
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "{d:?} is not a full digest (b3:<64 hex> or sha256:<64 hex>)"
        )))
    }
}

fn json_response(status: StatusCode, v: impl serde::Serialize) -> Result<Response> {
    let body = serde_json::to_vec(&v).map_err(RegistryError::internal)?;
    Ok((status, [(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn ok(v: impl serde::Serialize) -> Result<Response> {
    json_response(StatusCode::OK, v)
}

/// A page of a list, with the `Link` to the next one when there is one
/// (SPEC.md §7.2).
fn ok_page(v: impl serde::Serialize, link: Option<String>) -> Result<Response> {
    let mut resp = ok(v)?;
    if let Some(link) = link {
        let value = header::HeaderValue::from_str(&link).map_err(RegistryError::internal)?;
        resp.headers_mut().insert(header::LINK, value);
    }
    Ok(resp)
}

fn page_of(q: Option<&str>) -> Result<Page> {
    Page::of(q).map_err(invalid)
}

async fn body<T: for<'de> Deserialize<'de>>(req_body: Body) -> Result<T> {
    let bytes = crate::http::extract::read_body(req_body, MAX_BODY, Code::Invalid).await?;
    let bytes = if bytes.is_empty() {
        bytes::Bytes::from_static(b"{}")
    } else {
        bytes
    };
    serde_json::from_slice(&bytes).map_err(|e| invalid(format!("request body: {e}")))
}

/// `expires_at`: an RFC 3339 time or null.
fn parse_time(t: Option<&str>) -> Result<Option<u64>> {
    let Some(t) = t else { return Ok(None) };
    let at = humantime::parse_rfc3339_weak(t)
        .map_err(|e| invalid(format!("expires_at {t:?} is not an RFC 3339 time: {e}")))?;
    Ok(Some(
        at.duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| invalid(format!("expires_at {t:?} is before 1970")))?
            .as_secs(),
    ))
}

/// The volume API's routes (SPEC.md §7.3, §8.3): each path and method to
/// its handler. A path this API lacks answers 404 and a method a path does
/// not take 405, both `UNSUPPORTED`, so a client can tell "no such API"
/// from a refusal.
pub fn router() -> Router<Arc<App>> {
    let r = |m: MethodRouter<Arc<App>>| m.fallback(method_not_supported);
    Router::new()
        .route("/api/v1", r(get(api_info)))
        .route("/api/v1/", r(get(api_info)))
        .route("/api/v1/namespaces", r(get(namespaces)))
        .route("/api/v1/volumes", r(get(volumes)))
        .route("/api/v1/volumes/{*path}", any(volume))
        .route("/api/v1/gc", r(post(gc)))
        .route("/api/v1/keys", r(get(list_keys).post(create_key)))
        .route("/api/v1/keys/{id}", r(delete(revoke_key)))
        .route("/api/v1/whoami", r(get(whoami)))
        .route("/api/v1/syncs", r(get(list_syncs).post(create_sync)))
        .route("/api/v1/syncs/{id}", r(get(describe_sync)))
        .route("/api/v1/syncs/{id}/cancel", r(post(cancel_sync)))
        .route("/api/v1/secrets", r(get(list_secrets)))
        .route(
            "/api/v1/secrets/{name}",
            r(put(set_secret).delete(delete_secret)),
        )
        .route("/api/v1/{*rest}", any(no_such_endpoint))
}

async fn no_such_endpoint() -> RegistryError {
    RegistryError::with_status(Code::Unsupported, StatusCode::NOT_FOUND, "no such endpoint")
}

async fn method_not_supported() -> RegistryError {
    RegistryError::new(Code::Unsupported, "method not supported on this endpoint")
}

/// A path parameter (`/api/v1/keys/{id}`, …), percent-decoded. One that
/// does not decode (not UTF-8) is the API's own `INVALID` error, not
/// axum's plain-text rejection.
pub(crate) struct Param(String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = RegistryError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Param> {
        let Path(p) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| invalid(e.body_text()))?;
        Ok(Param(p))
    }
}

/// A volume's name from a path, checked once (SPEC.md §1.1:
/// `namespace/volume`, each component a name component).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VolumeName(String);

impl std::str::FromStr for VolumeName {
    type Err = RegistryError;
    fn from_str(name: &str) -> Result<VolumeName> {
        check_name(name)?;
        Ok(VolumeName(name.to_string()))
    }
}

impl std::ops::Deref for VolumeName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A version's digest in a path: `b3:<64 hex>` or `sha256:<64 hex>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VersionDigest(String);

impl VersionDigest {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for VersionDigest {
    type Err = RegistryError;
    fn from_str(d: &str) -> Result<VersionDigest> {
        check_digest(d)?;
        Ok(VersionDigest(d.to_string()))
    }
}

/// What follows a volume's name (after the `-` segment), typed.
#[derive(Debug)]
pub(crate) enum VolumeSub {
    Volume,
    Versions,
    Version(VersionDigest),
    Restore(VersionDigest),
    Entries(VersionDigest),
    Diff(VersionDigest, VersionDigest),
    Stats,
    Tag(sealvol_spec::Tag),
    Claim,
    ClaimToken(String),
}

/// `/api/v1/volumes/NAME[/-/…]`, parsed once: the name checked, digests
/// and tags typed. The split is [`split_volume_path`]'s, which the access
/// table uses too.
pub(crate) struct VolumePath {
    pub name: VolumeName,
    pub sub: VolumeSub,
}

impl<S: Send + Sync> FromRequestParts<S> for VolumePath {
    type Rejection = RegistryError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<VolumePath> {
        let Path(path) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| invalid(e.body_text()))?;
        let Some((name, raw)) = split_volume_path(&path) else {
            return Err(no_such_endpoint().await);
        };
        let sub = match raw {
            RawSub::Volume => VolumeSub::Volume,
            RawSub::Versions => VolumeSub::Versions,
            RawSub::Version(d) => VolumeSub::Version(d.parse()?),
            RawSub::Restore(d) => VolumeSub::Restore(d.parse()?),
            RawSub::Entries(d) => VolumeSub::Entries(d.parse()?),
            RawSub::Diff(a, b) => VolumeSub::Diff(a.parse()?, b.parse()?),
            RawSub::Stats => VolumeSub::Stats,
            RawSub::Tag(t) => VolumeSub::Tag(
                t.parse()
                    .map_err(|e: sealvol_spec::reference::RefError| invalid(e.to_string()))?,
            ),
            RawSub::Claim => VolumeSub::Claim,
            RawSub::ClaimToken(t) => VolumeSub::ClaimToken(t),
        };
        Ok(VolumePath {
            name: name.parse()?,
            sub,
        })
    }
}

/// What follows a volume's name, as the path spells it.
pub(crate) enum RawSub {
    Volume,
    Versions,
    Version(String),
    Restore(String),
    Entries(String),
    Diff(String, String),
    Stats,
    Tag(String),
    Claim,
    ClaimToken(String),
}

/// Splits `NAME[/-/SUB]` (the part after `/api/v1/volumes/`): a name holds
/// slashes, so the segment `-`, which no name component can be, ends it.
pub(crate) fn split_volume_path(path: &str) -> Option<(String, RawSub)> {
    let Some((name, sub)) = path.split_once("/-/") else {
        return Some((path.to_string(), RawSub::Volume));
    };
    let segs: Vec<&str> = sub.split('/').collect();
    let sub = match segs.as_slice() {
        ["versions"] => RawSub::Versions,
        ["versions", d] => RawSub::Version(d.to_string()),
        ["versions", d, "restore"] => RawSub::Restore(d.to_string()),
        ["versions", d, "entries"] => RawSub::Entries(d.to_string()),
        ["versions", a, "diff", b] => RawSub::Diff(a.to_string(), b.to_string()),
        ["stats"] => RawSub::Stats,
        ["tags", t] => RawSub::Tag(t.to_string()),
        ["claim"] => RawSub::Claim,
        ["claim", t] => RawSub::ClaimToken(t.to_string()),
        _ => return None,
    };
    Some((name.to_string(), sub))
}

/// `GET /api/v1`.
async fn api_info(State(app): State<Arc<App>>) -> Result<Response> {
    ok(api::ApiInfo {
        api: api::API.to_string(),
        retention_seconds: app.policy.retention_seconds,
        gc_grace_seconds: app.policy.gc_grace_seconds,
        claim_ttl_seconds: app.policy.claim_ttl_seconds,
    })
}

/// `GET /api/v1/namespaces`: those holding a volume the caller may pull.
async fn namespaces(State(app): State<Arc<App>>, caller: Caller) -> Result<Response> {
    let namespaces = app.meta(move |m| m.namespaces(|v| caller.sees(v))).await?;
    ok(api::NamespaceList { namespaces })
}

/// `GET /api/v1/volumes[?namespace=NS]`: those the caller may pull.
async fn volumes(
    State(app): State<Arc<App>>,
    caller: Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let page = page_of(q.as_deref())?;
    let ns = query_value(q.as_deref(), "namespace");
    let filter = ns.clone();
    let mut volumes = app.meta(move |m| m.volumes(filter.as_deref())).await?;
    volumes.retain(|v| caller.sees(&v.name));
    let (volumes, next) = page.take(volumes, |v| v.name.clone(), true);
    let extra: Vec<(&str, &str)> = ns.iter().map(|n| ("namespace", n.as_str())).collect();
    let link = next.map(|last| next_link("/api/v1/volumes", &extra, page.n.unwrap_or(0), &last));
    ok_page(api::VolumeList { volumes }, link)
}

/// `GET /api/v1/whoami[?repository=NAME]`.
async fn whoami(caller: Caller, RawQuery(q): RawQuery) -> Result<Response> {
    let repository = query_value(q.as_deref(), "repository").filter(|r| !r.is_empty());
    let actions = match &repository {
        Some(r) => api::Action::ALL
            .into_iter()
            .filter(|a| caller.may(r, *a))
            .collect(),
        None => Vec::new(),
    };
    ok(api::WhoAmI {
        subject: caller.subject.name().to_string(),
        anonymous: matches!(caller.subject, crate::auth::policy::Subject::Anonymous),
        admin: caller.is_admin(),
        authentication: caller.registry_authenticates(),
        repository,
        actions,
    })
}

/// `POST /api/v1/gc[?dry_run=true]`.
async fn gc(State(app): State<Arc<App>>, RawQuery(q): RawQuery) -> Result<Response> {
    let dry_run = query_flag(q.as_deref(), "dry_run");
    ok(crate::service::gc::collect(&app, dry_run).await?)
}

/// Every `/api/v1/volumes/NAME[/-/…]` endpoint, by what follows the name
/// and the method.
async fn volume(
    State(app): State<Arc<App>>,
    VolumePath { name, sub }: VolumePath,
    method: Method,
    RawQuery(q): RawQuery,
    req_body: Body,
) -> Result<Response> {
    let app = &app;
    let retention = app.policy.retention_seconds;
    let now = app.now();
    let name = name.0;
    match (sub, method) {
        (VolumeSub::Volume, Method::GET) => ok(app.meta(move |m| m.volume(&name)).await?),
        (VolumeSub::Volume, Method::PATCH) => {
            let b: api::VolumePatch = body(req_body).await?;
            let at = parse_time(b.expires_at.as_deref())?;
            ok(app
                .meta(move |m| m.set_volume_expiry(&name, at, now))
                .await?)
        }
        (VolumeSub::Volume, Method::DELETE) => {
            let tombstoned = app
                .meta(move |m| m.delete_volume(&name, now, retention))
                .await?;
            ok(api::Tombstoned { tombstoned })
        }
        (VolumeSub::Versions, Method::GET) => {
            let page = page_of(q.as_deref())?;
            let all = query_flag(q.as_deref(), "include_tombstoned");
            let path = format!("/api/v1/volumes/{name}/-/versions");
            let versions = app.meta(move |m| m.versions(&name, all, retention)).await?;
            let (versions, next) = page.take(versions, |v| v.digest.to_string(), false);
            let extra: &[(&str, &str)] = if all {
                &[("include_tombstoned", "true")]
            } else {
                &[]
            };
            let link = next.map(|last| next_link(&path, extra, page.n.unwrap_or(0), &last));
            ok_page(api::VersionList { versions }, link)
        }
        (VolumeSub::Entries(d), Method::GET) => {
            let page = page_of(q.as_deref())?;
            let dir = query_value(q.as_deref(), "path").unwrap_or_default();
            let tree = crate::service::trees::tree_of(app, &name, &d.0).await?;
            let (entries, next) = page.take(
                crate::service::trees::entries_in(&tree, &dir)?,
                |e| e.path.clone(),
                false,
            );
            let path = format!("/api/v1/volumes/{name}/-/versions/{}/entries", d.0);
            let link = next.map(|last| {
                next_link(&path, &[("path", dir.as_str())], page.n.unwrap_or(0), &last)
            });
            ok_page(api::EntryList { path: dir, entries }, link)
        }
        (VolumeSub::Diff(a, b), Method::GET) => {
            let (ta, tb) = futures_util::try_join!(
                crate::service::trees::tree_of(app, &name, &a.0),
                crate::service::trees::tree_of(app, &name, &b.0)
            )?;
            let (na, nb) = (format!("{name}@{}", a.0), format!("{name}@{}", b.0));
            let d = tokio::task::spawn_blocking(move || sealvol_spec::diff::diff(na, &ta, nb, &tb))
                .await
                .map_err(RegistryError::internal)?;
            ok(d)
        }
        (VolumeSub::Stats, Method::GET) => {
            ok(crate::service::volumes::volume_stats(app, &name).await?)
        }
        (VolumeSub::Version(d), Method::GET) => {
            ok(app.meta(move |m| m.version(&name, &d.0, retention)).await?)
        }
        (VolumeSub::Version(d), Method::DELETE) => ok(app
            .meta(move |m| m.delete_version(&name, &d.0, now, retention))
            .await?),
        (VolumeSub::Restore(d), Method::POST) => {
            // Restoring puts manifests back that garbage collection may be
            // sweeping; wait for it.
            let _sweep = app.sweep.read().await;
            ok(app
                .meta(move |m| m.restore_version(&name, &d.0, now, retention))
                .await?)
        }
        (VolumeSub::Tag(tag), Method::PUT) => {
            let b: api::TagRequest = body(req_body).await?;
            check_digest(&b.digest)?;
            let at = parse_time(b.expires_at.as_deref())?;
            let tag = tag.to_string();
            ok(app
                .meta(move |m| m.set_tag(&name, &tag, &b.digest, at, now))
                .await?)
        }
        (VolumeSub::Tag(tag), Method::DELETE) => {
            let tag = tag.to_string();
            app.meta(move |m| m.remove_user_tag(&name, &tag, now))
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (VolumeSub::Claim, Method::POST) => {
            let b: api::ClaimRequest = body(req_body).await?;
            if b.holder.len() > crate::store::meta::claims::MAX_HOLDER_LEN {
                return Err(invalid(format!(
                    "holder is longer than {} bytes",
                    crate::store::meta::claims::MAX_HOLDER_LEN
                )));
            }
            let ttl = app.policy.claim_ttl_seconds;
            let (repo, holder) = (name.clone(), b.holder.clone());
            let taken = app
                .meta(move |m| m.acquire_claim(&repo, &holder, now, ttl))
                .await?;
            match taken {
                Ok(c) => json_response(StatusCode::CREATED, claim_view(c, ttl)),
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
        (VolumeSub::ClaimToken(token), Method::PUT) => {
            let ttl = app.policy.claim_ttl_seconds;
            let (repo, t) = (name.clone(), token.clone());
            let renewed = app
                .meta(move |m| m.renew_claim(&repo, &t, now, ttl))
                .await?;
            match renewed {
                Some(c) => ok(claim_view(c, ttl)),
                None => Err(RegistryError::new(
                    Code::ClaimUnknown,
                    format!("the push claim on {name} lapsed or was never held"),
                )),
            }
        }
        (VolumeSub::ClaimToken(token), Method::DELETE) => {
            let repo = name.clone();
            app.meta(move |m| m.release_claim(&repo, &token)).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(method_not_supported().await),
    }
}

/// `GET /api/v1/keys`.
async fn list_keys(State(app): State<Arc<App>>) -> Result<Response> {
    ok(api::ApiKeyList {
        keys: app.meta(|m| m.keys()).await?,
    })
}

/// `POST /api/v1/keys`: the answer holds the secret, once.
async fn create_key(
    State(app): State<Arc<App>>,
    caller: Caller,
    req_body: Body,
) -> Result<Response> {
    let by = caller.subject.name().to_string();
    let b: api::ApiKeyRequest = body(req_body).await?;
    let expires = parse_time(b.expires_at.as_deref())?;
    let now = app.now();
    let key = app
        .meta(move |m| m.create_key(&b, expires, &by, now))
        .await?;
    json_response(StatusCode::CREATED, key)
}

/// `DELETE /api/v1/keys/ID`.
async fn revoke_key(State(app): State<Arc<App>>, Param(id): Param) -> Result<Response> {
    app.meta(move |m| m.delete_key(&id)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /api/v1/syncs`.
async fn create_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    req_body: Body,
) -> Result<Response> {
    let b: api::SyncRequest = body(req_body).await?;
    json_response(
        StatusCode::CREATED,
        crate::http::api::syncs::create(&app, &caller, b).await?,
    )
}

/// `GET /api/v1/syncs[?dest=NAME]`.
async fn list_syncs(
    State(app): State<Arc<App>>,
    caller: Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let dest = query_value(q.as_deref(), "dest");
    ok(crate::http::api::syncs::list(&app, &caller, dest).await?)
}

/// `GET /api/v1/syncs/ID`.
async fn describe_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::http::api::syncs::describe(&app, &caller, &id).await?)
}

/// `POST /api/v1/syncs/ID/cancel`.
async fn cancel_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    Param(id): Param,
) -> Result<Response> {
    ok(crate::http::api::syncs::cancel(&app, &caller, id).await?)
}

/// `GET /api/v1/secrets`.
async fn list_secrets(State(app): State<Arc<App>>) -> Result<Response> {
    ok(crate::http::api::syncs::list_secrets(&app).await?)
}

/// `PUT /api/v1/secrets/NAME?for=URI…[&dest=GLOB…]`.
async fn set_secret(
    State(app): State<Arc<App>>,
    Param(name): Param,
    RawQuery(q): RawQuery,
    req_body: Body,
) -> Result<Response> {
    let (mut for_sources, mut dest) = (Vec::new(), Vec::new());
    let pairs = q
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty());
    for kv in pairs {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "for" => for_sources.push(crate::http::query::decode(v)),
            "dest" => dest.push(crate::http::query::decode(v)),
            other => {
                return Err(RegistryError::new(
                    Code::Invalid,
                    format!("unknown parameter {other}; use for= and dest="),
                ))
            }
        }
    }
    crate::http::api::syncs::set_secret(&app, &name, for_sources, dest, req_body).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /api/v1/secrets/NAME`.
async fn delete_secret(State(app): State<Arc<App>>, Param(name): Param) -> Result<Response> {
    crate::http::api::syncs::delete_secret(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn claim_view(c: crate::store::meta::claims::Claim, ttl: u64) -> api::Claim {
    api::Claim {
        token: c.token,
        holder: c.holder,
        expires_at: Some(rfc3339(c.expires_at)),
        ttl_seconds: ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_split_names_at_the_dash_segment() {
        assert_eq!(route("/api/v1"), Some(Route::Root));
        assert_eq!(route("/api/v1/"), Some(Route::Root));
        assert_eq!(
            route("/api/v1/volumes/a/versions"),
            Some(Route::Volume("a/versions".into()))
        );
        assert_eq!(
            route("/api/v1/volumes/w/a/-/versions"),
            Some(Route::Versions("w/a".into()))
        );
        assert_eq!(
            route("/api/v1/volumes/w/a/b/-/versions/b3:00/restore"),
            Some(Route::Restore("w/a/b".into(), "b3:00".into()))
        );
        assert_eq!(
            route("/api/v1/volumes/w/a/-/tags/prod"),
            Some(Route::Tag("w/a".into(), "prod".into()))
        );
        assert_eq!(
            route("/api/v1/volumes/w/a/-/claim/tok"),
            Some(Route::ClaimToken("w/a".into(), "tok".into()))
        );
        assert_eq!(route("/api/v1/volumes/w/a/-/nope"), None);
        assert_eq!(route("/api/v2/volumes"), None);
    }

    #[test]
    fn digests_and_times() {
        assert!(check_digest(&format!("b3:{}", "a".repeat(64))).is_ok());
        assert!(check_digest(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(check_digest("b3:abc").is_err());
        assert_eq!(
            parse_time(Some("1970-01-02T00:00:00Z")).unwrap(),
            Some(86_400)
        );
        assert!(parse_time(Some("tomorrow")).is_err());
        assert_eq!(parse_time(None).unwrap(), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any path splits or not without panicking; a name and what
        /// follows it come back apart.
        #[test]
        fn volume_paths_split_at_the_dash_segment(
            any in "\\PC{0,40}",
            name in "[a-z0-9]{1,5}(/[a-z0-9]{1,5}){1,3}",
            tag in "[a-z0-9]{1,8}",
        ) {
            let _ = split_volume_path(&any);
            let _ = route(&format!("/api/v1/{any}"));
            let split = split_volume_path(&format!("{name}/-/tags/{tag}"));
            proptest::prop_assert!(matches!(split, Some((n, RawSub::Tag(t))) if n == name && t == tag));
            proptest::prop_assert!(matches!(split_volume_path(&name), Some((n, RawSub::Volume)) if n == name));
            let longer = format!("{name}/-/tags/{tag}/x");
            proptest::prop_assert!(split_volume_path(&longer).is_none());
        }
    }
}
