//! `/api/v1`, `/api/v1/namespaces`, `/api/v1/volumes[/NAME[/-/…]]` and
//! `/api/v1/whoami`: volumes, versions, tags and claims (SPEC.md §7.3).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::api;

use crate::auth::Caller;
use crate::error::{RegistryError, Result};
use crate::http::api::{
    body, json_response, method_not_supported, ok, ok_page, page_of, parse_time,
};
use crate::http::extract::check_digest;
use crate::http::extract::{VolumePath, VolumeSub};
use crate::http::query::{flag as query_flag, next_link, param as query_value};
use crate::state::app::App;
/// `GET /api/v1`.
pub(crate) async fn api_info(State(app): State<Arc<App>>) -> Result<Response> {
    ok(api::ApiInfo {
        api: api::API.to_string(),
        retention_seconds: app.lifetimes.retention_seconds,
        gc_grace_seconds: app.lifetimes.gc_grace_seconds,
        claim_ttl_seconds: app.lifetimes.claim_ttl_seconds,
    })
}

/// `GET /api/v1/namespaces`: those holding a volume the caller may pull.
pub(crate) async fn namespaces(State(app): State<Arc<App>>, caller: Caller) -> Result<Response> {
    let namespaces = crate::service::volumes::namespaces(&app, move |v| caller.sees(v)).await?;
    ok(api::NamespaceList { namespaces })
}
/// `GET /api/v1/volumes[?namespace=NS]`: those the caller may pull.
pub(crate) async fn volumes(
    State(app): State<Arc<App>>,
    caller: Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let page = page_of(q.as_deref())?;
    let ns = query_value(q.as_deref(), "namespace");
    let mut volumes = crate::service::volumes::list(&app, ns.clone()).await?;
    volumes.retain(|v| caller.sees(&v.name));
    let (volumes, next) = page.take(volumes, |v| v.name.clone(), true);
    let extra: Vec<(&str, &str)> = ns.iter().map(|n| ("namespace", n.as_str())).collect();
    let link = next.map(|last| next_link("/api/v1/volumes", &extra, page.n.unwrap_or(0), &last));
    ok_page(api::VolumeList { volumes }, link)
}
/// `GET /api/v1/whoami[?repository=NAME]`.
pub(crate) async fn whoami(caller: Caller, RawQuery(q): RawQuery) -> Result<Response> {
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
/// Every `/api/v1/volumes/NAME[/-/…]` endpoint, by what follows the name
/// and the method.
pub(crate) async fn volume(
    State(app): State<Arc<App>>,
    VolumePath { name, sub }: VolumePath,
    method: Method,
    RawQuery(q): RawQuery,
    req_body: Body,
) -> Result<Response> {
    let app = &app;
    let name = name.0;
    match (sub, method) {
        (VolumeSub::Volume, Method::GET) => ok(crate::service::volumes::get(app, &name).await?),
        (VolumeSub::Volume, Method::PATCH) => {
            let b: api::VolumePatch = body(req_body).await?;
            let at = parse_time(b.expires_at.as_deref())?;
            ok(crate::service::volumes::set_expiry(app, &name, at).await?)
        }
        (VolumeSub::Volume, Method::DELETE) => {
            let tombstoned = crate::service::volumes::delete(app, &name).await?;
            ok(api::Tombstoned { tombstoned })
        }
        (VolumeSub::Versions, Method::GET) => {
            let page = page_of(q.as_deref())?;
            let all = query_flag(q.as_deref(), "include_tombstoned");
            let path = format!("/api/v1/volumes/{name}/-/versions");
            let versions = crate::service::volumes::versions(app, &name, all).await?;
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
            ok(crate::service::volumes::version(app, &name, &d.0).await?)
        }
        (VolumeSub::Version(d), Method::DELETE) => {
            ok(crate::service::volumes::delete_version(app, &name, &d.0).await?)
        }
        (VolumeSub::Restore(d), Method::POST) => {
            // Restoring puts manifests back that garbage collection may be
            // sweeping; wait for it.
            let _sweep = app.sweep.read().await;
            ok(crate::service::volumes::restore_version(app, &name, &d.0).await?)
        }
        (VolumeSub::Tag(tag), Method::PUT) => {
            let b: api::TagRequest = body(req_body).await?;
            check_digest(&b.digest)?;
            let at = parse_time(b.expires_at.as_deref())?;
            let tag = tag.to_string();
            ok(crate::service::volumes::set_tag(app, &name, &tag, &b.digest, at).await?)
        }
        (VolumeSub::Tag(tag), Method::DELETE) => {
            crate::service::volumes::remove_tag(app, &name, &tag.to_string()).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (VolumeSub::Claim, Method::POST) => {
            let b: api::ClaimRequest = body(req_body).await?;
            let claim = crate::service::claims::acquire(app, &name, &b.holder).await?;
            json_response(StatusCode::CREATED, claim)
        }
        (VolumeSub::ClaimToken(token), Method::PUT) => {
            ok(crate::service::claims::renew(app, &name, &token).await?)
        }
        (VolumeSub::ClaimToken(token), Method::DELETE) => {
            crate::service::claims::release(app, &name, token).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(method_not_supported().await),
    }
}
