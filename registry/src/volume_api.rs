//! The volume API (SPEC.md §7.3): JSON under `/api/v1`, beside the OCI
//! API and over the same store. A volume name holds slashes, so the
//! segment `-` separates it from what follows, as GitLab's routes do.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::api;
use serde::Deserialize;

use crate::app::App;
use crate::error::{Code, RegistryError, Result};
use crate::volumes::rfc3339;

/// Largest request body the API reads.
const MAX_BODY: usize = 64 << 10;

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
            let vol = rest.strip_prefix("volumes/")?;
            let Some((name, sub)) = vol.split_once("/-/") else {
                return Some(Route::Volume(vol.to_string()));
            };
            let name = name.to_string();
            let segs: Vec<&str> = sub.split('/').collect();
            match segs.as_slice() {
                ["versions"] => Route::Versions(name),
                ["versions", d] => Route::Version(name, d.to_string()),
                ["versions", d, "restore"] => Route::Restore(name, d.to_string()),
                ["tags", t] => Route::Tag(name, t.to_string()),
                ["claim"] => Route::Claim(name),
                ["claim", t] => Route::ClaimToken(name, t.to_string()),
                _ => return None,
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

fn query_flag(req: &Request, key: &str) -> bool {
    req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == key || kv == format!("{key}=true") || kv == format!("{key}=1"))
    })
}

fn query_value(req: &Request, key: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    })
}

fn json_response(status: StatusCode, v: impl serde::Serialize) -> Result<Response> {
    let body = serde_json::to_vec(&v).map_err(RegistryError::internal)?;
    Ok((status, [(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn ok(v: impl serde::Serialize) -> Result<Response> {
    json_response(StatusCode::OK, v)
}

async fn body<T: for<'de> Deserialize<'de>>(req: Request) -> Result<T> {
    let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|_| invalid(format!("request body is larger than {MAX_BODY} bytes")))?;
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

/// The one handler behind every `/api/v1` path.
pub async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    let result = match route(req.uri().path()) {
        None => Err(RegistryError::with_status(
            Code::Unsupported,
            StatusCode::NOT_FOUND,
            "no such endpoint",
        )),
        Some(r) => handle(&app, r, req).await,
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn handle(app: &Arc<App>, route: Route, req: Request) -> Result<Response> {
    let method = req.method().clone();
    let retention = app.policy.retention_seconds;
    let now = app.now();
    match (route, method) {
        (Route::Root, Method::GET) => ok(api::ApiInfo {
            api: api::API.to_string(),
            retention_seconds: retention,
            gc_grace_seconds: app.policy.gc_grace_seconds,
            claim_ttl_seconds: app.policy.claim_ttl_seconds,
        }),
        (Route::Namespaces, Method::GET) => {
            let caller = crate::auth::caller(&req);
            let namespaces = lifecycle(app, move |m| m.namespaces(|v| caller.sees(v))).await?;
            ok(api::NamespaceList { namespaces })
        }
        (Route::Volumes, Method::GET) => {
            let ns = query_value(&req, "namespace");
            let caller = crate::auth::caller(&req);
            let mut volumes = lifecycle(app, move |m| m.volumes(ns.as_deref())).await?;
            volumes.retain(|v| caller.sees(&v.name));
            ok(api::VolumeList { volumes })
        }
        (Route::Gc, Method::POST) => {
            let dry_run = query_flag(&req, "dry_run");
            ok(crate::gc::collect(app, dry_run).await?)
        }
        (Route::Volume(name), m) => {
            check_name(&name)?;
            match m {
                Method::GET => ok(lifecycle(app, move |m| m.volume(&name)).await?),
                Method::PATCH => {
                    let b: api::VolumePatch = body(req).await?;
                    let at = parse_time(b.expires_at.as_deref())?;
                    ok(lifecycle(app, move |m| m.set_volume_expiry(&name, at, now)).await?)
                }
                Method::DELETE => {
                    let tombstoned =
                        lifecycle(app, move |m| m.delete_volume(&name, now, retention)).await?;
                    ok(api::Tombstoned { tombstoned })
                }
                _ => unsupported(),
            }
        }
        (Route::Versions(name), Method::GET) => {
            check_name(&name)?;
            let all = query_flag(&req, "include_tombstoned");
            let versions = lifecycle(app, move |m| m.versions(&name, all, retention)).await?;
            ok(api::VersionList { versions })
        }
        (Route::Version(name, d), m) => {
            check_name(&name)?;
            check_digest(&d)?;
            match m {
                Method::GET => ok(lifecycle(app, move |m| m.version(&name, &d, retention)).await?),
                Method::DELETE => {
                    ok(
                        lifecycle(app, move |m| m.delete_version(&name, &d, now, retention))
                            .await?,
                    )
                }
                _ => unsupported(),
            }
        }
        (Route::Restore(name, d), Method::POST) => {
            check_name(&name)?;
            check_digest(&d)?;
            // Restoring puts manifests back that garbage collection may be
            // sweeping; wait for it.
            let _sweep = app.sweep.read().await;
            ok(lifecycle(app, move |m| m.restore_version(&name, &d, now, retention)).await?)
        }
        (Route::Tag(name, tag), m) => {
            check_name(&name)?;
            tag.parse::<sealvol_spec::Tag>()
                .map_err(|e| invalid(e.to_string()))?;
            match m {
                Method::PUT => {
                    let b: api::TagRequest = body(req).await?;
                    check_digest(&b.digest)?;
                    let at = parse_time(b.expires_at.as_deref())?;
                    ok(lifecycle(app, move |m| m.set_tag(&name, &tag, &b.digest, at, now)).await?)
                }
                Method::DELETE => {
                    lifecycle(app, move |m| m.remove_user_tag(&name, &tag, now)).await?;
                    Ok(StatusCode::NO_CONTENT.into_response())
                }
                _ => unsupported(),
            }
        }
        (Route::Claim(name), Method::POST) => {
            check_name(&name)?;
            let b: api::ClaimRequest = body(req).await?;
            let ttl = app.policy.claim_ttl_seconds;
            match app.claims.acquire(&name, &b.holder, now, ttl) {
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
        (Route::ClaimToken(name, token), m) => {
            check_name(&name)?;
            let ttl = app.policy.claim_ttl_seconds;
            match m {
                Method::PUT => match app.claims.renew(&name, &token, now, ttl) {
                    Some(c) => ok(claim_view(c, ttl)),
                    None => Err(RegistryError::new(
                        Code::ClaimUnknown,
                        format!("the push claim on {name} lapsed or was never held"),
                    )),
                },
                Method::DELETE => {
                    app.claims.release(&name, &token);
                    Ok(StatusCode::NO_CONTENT.into_response())
                }
                _ => unsupported(),
            }
        }
        (Route::Syncs, Method::POST) => {
            let caller = crate::auth::caller(&req);
            let b: api::SyncRequest = body(req).await?;
            json_response(
                StatusCode::CREATED,
                crate::sync_api::create(app, &caller, b).await?,
            )
        }
        (Route::Syncs, Method::GET) => {
            let dest = query_value(&req, "dest").map(|d| percent_decode(&d));
            ok(crate::sync_api::list(app, &crate::auth::caller(&req), dest).await?)
        }
        (Route::Sync(id), Method::GET) => {
            ok(crate::sync_api::describe(app, &crate::auth::caller(&req), &id).await?)
        }
        (Route::SyncCancel(id), Method::POST) => {
            ok(crate::sync_api::cancel(app, &crate::auth::caller(&req), id).await?)
        }
        (Route::Keys, Method::GET) => ok(api::ApiKeyList {
            keys: lifecycle(app, |m| m.keys()).await?,
        }),
        (Route::Keys, Method::POST) => {
            let by = crate::auth::caller(&req).subject.name().to_string();
            let b: api::ApiKeyRequest = body(req).await?;
            let expires = parse_time(b.expires_at.as_deref())?;
            let key = lifecycle(app, move |m| m.create_key(&b, expires, &by, now)).await?;
            json_response(StatusCode::CREATED, key)
        }
        (Route::Key(id), Method::DELETE) => {
            lifecycle(app, move |m| m.delete_key(&id)).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Route::Secrets, Method::GET) => ok(crate::sync_api::list_secrets(app).await?),
        (Route::Secret(name), Method::PUT) => {
            crate::sync_api::set_secret(app, &name, req.into_body()).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Route::Secret(name), Method::DELETE) => {
            crate::sync_api::delete_secret(app, &name).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => unsupported(),
    }
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn claim_view(c: crate::claims::Claim, ttl: u64) -> api::Claim {
    api::Claim {
        token: c.token,
        holder: c.holder,
        expires_at: Some(rfc3339(c.expires_at)),
        ttl_seconds: ttl,
    }
}

fn unsupported() -> Result<Response> {
    Err(RegistryError::new(
        Code::Unsupported,
        "method not supported on this endpoint",
    ))
}

/// Runs a metadata operation (volumes, keys) off the async threads.
async fn lifecycle<T: Send + 'static, E: Into<RegistryError> + Send + 'static>(
    app: &App,
    f: impl FnOnce(&crate::meta::MetaStore) -> std::result::Result<T, E> + Send + 'static,
) -> Result<T> {
    let m = Arc::clone(&app.meta);
    tokio::task::spawn_blocking(move || f(&m))
        .await
        .map_err(RegistryError::internal)?
        .map_err(Into::into)
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
}
