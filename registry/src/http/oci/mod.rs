//! The OCI Distribution v1.1 HTTP API. Repository names hold slashes, so
//! one handler parses `/v2/...` paths from the end (as distribution's
//! router does) and each endpoint is a function that reads like its
//! paragraph of the spec, returning `Result<Response, RegistryError>`.

pub mod blobs;
pub mod manifests;
pub mod uploads;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use crate::error::{Code, RegistryError, Result};
use crate::http::extract::check_repository_name;
use crate::http::query::query_param;
use crate::http::respond::{hv, Json};
use crate::http::routes::Oci;
use crate::service::manifests::{parse_digest, OCI_INDEX};
use crate::state::app::App;

/// The one handler behind every `/v2` path of a registry serving its own
/// store.
pub async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    answer(crate::http::routes::oci(req.uri().path()), |r| {
        handle_direct(app, r, req)
    })
    .await
}

/// The one handler behind every `/v2` path of a pull-through cache: the
/// decorator `http::router` chooses once at start instead of
/// [`dispatch`], so no handler asks whether the registry is a cache.
pub async fn dispatch_cached(
    app: Arc<App>,
    up: Arc<crate::state::upstream::Upstream>,
    req: Request,
) -> Response {
    answer(crate::http::routes::oci(req.uri().path()), |r| async move {
        handle_cached(app, &up, r, req).await
    })
    .await
}

/// A `/v2` path no endpoint serves is answered 404 `UNSUPPORTED`.
async fn answer<F: std::future::Future<Output = Result<Response>>>(
    route: Option<Oci>,
    handle: impl FnOnce(Oci) -> F,
) -> Response {
    let result = match route {
        None => Err(RegistryError::with_status(
            Code::Unsupported,
            StatusCode::NOT_FOUND,
            "no such endpoint",
        )),
        Some(r) => handle(r).await,
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Every endpoint, served from this registry's own store.
async fn handle_direct(app: Arc<App>, route: Oci, req: Request) -> Result<Response> {
    let method = req.method().clone();
    match route {
        Oci::Base => Ok(Json(serde_json::json!({})).into_response()),
        Oci::Catalog if method == Method::GET => {
            let (n, last) = page(&req)?;
            catalog(&app, n, last, crate::http::extract::caller(&req)).await
        }
        Oci::Tags(name) if method == Method::GET => {
            check_repository_name(&name)?;
            let (n, last) = page(&req)?;
            tags(&app, name, n, last).await
        }
        Oci::Manifest(name, reference) => {
            check_repository_name(&name)?;
            match method {
                Method::GET | Method::HEAD => {
                    manifests::get_manifest(&app, name, reference, method == Method::HEAD).await
                }
                Method::PUT => manifests::put_manifest(&app, name, reference, req).await,
                Method::DELETE => manifests::delete_manifest(&app, name, reference).await,
                _ => unsupported(),
            }
        }
        Oci::Blob(name, digest) => {
            check_repository_name(&name)?;
            let digest = parse_digest(&digest)?;
            match method {
                Method::GET | Method::HEAD => {
                    blobs::get_blob(&app, name, digest, req.headers(), method == Method::HEAD).await
                }
                Method::DELETE => blobs::delete_blob(&app, name, digest).await,
                _ => unsupported(),
            }
        }
        Oci::UploadStart(name) if method == Method::POST => {
            check_repository_name(&name)?;
            uploads::start_upload(&app, name, req).await
        }
        Oci::Upload(name, id) => {
            check_repository_name(&name)?;
            uploads::check_session(&app, &name, &id).await?;
            match method {
                Method::GET => uploads::upload_status(&app, name, id).await,
                Method::PATCH => uploads::patch_upload(&app, name, id, req).await,
                Method::PUT => uploads::put_upload(&app, name, id, req).await,
                Method::DELETE => uploads::cancel_upload(&app, id).await,
                _ => unsupported(),
            }
        }
        Oci::Referrers(name, digest) if method == Method::GET => {
            check_repository_name(&name)?;
            let filter = query_param(&req, "artifactType");
            let subject = parse_digest(&digest)?;
            let found =
                crate::service::manifests::referrers(&app, &name, &subject, filter.as_deref())
                    .await?;
            referrers(found, filter.is_some())
        }
        _ => unsupported(),
    }
}

/// The same endpoints on a pull-through cache (`pull_through`): reads
/// bring what is missing from the upstream first; writes are refused.
async fn handle_cached(
    app: Arc<App>,
    up: &Arc<crate::state::upstream::Upstream>,
    route: Oci,
    req: Request,
) -> Result<Response> {
    use crate::service::pull_through as cache;
    let method = req.method().clone();
    let read = method == Method::GET || method == Method::HEAD;
    match route {
        Oci::Manifest(name, reference) if read => {
            check_repository_name(&name)?;
            let _pin = cache::manifest(&app, up, &name, &reference).await?;
            manifests::get_manifest(&app, name, reference, method == Method::HEAD).await
        }
        Oci::Blob(name, digest) if read => {
            check_repository_name(&name)?;
            let digest = parse_digest(&digest)?;
            let pin = cache::blob(&app, up, &name, &digest).await?;
            up.used(&digest, app.now());
            // The body holds its bytes already (a mapping, or a stream the
            // store keeps serving): eviction may go on once it is made.
            let resp =
                blobs::get_blob(&app, name, digest, req.headers(), method == Method::HEAD).await;
            drop(pin);
            cache::settle(&app, up).await;
            resp
        }
        Oci::Tags(name) if method == Method::GET => {
            check_repository_name(&name)?;
            let (n, last) = page(&req)?;
            match cache::tags(up, &name).await {
                Some(all) => Ok(tag_page(&name, all, n, last)),
                None => tags(&app, name, n, last).await,
            }
        }
        Oci::Referrers(name, digest) if method == Method::GET => {
            check_repository_name(&name)?;
            let filter = query_param(&req, "artifactType");
            let subject = parse_digest(&digest)?;
            let found = cache::referrers(&app, up, &name, &subject, filter.as_deref()).await?;
            referrers(found, filter.is_some())
        }
        Oci::Manifest(..) | Oci::Blob(..) | Oci::UploadStart(_) | Oci::Upload(..) => {
            Err(cache::refuse_write(up))
        }
        Oci::Base | Oci::Catalog => {
            // What is cached: the base and the catalog.
            Box::pin(handle_direct(app, route, req)).await
        }
        _ => unsupported(),
    }
}

/// One page of a full tag list, sorted, after `last`.
fn tag_page(name: &str, mut all: Vec<String>, n: usize, last: Option<String>) -> Response {
    all.sort();
    all.dedup();
    let start = match &last {
        Some(l) => all.partition_point(|t| t <= l),
        None => 0,
    };
    let page: Vec<String> = all[start..].iter().take(n).cloned().collect();
    let more = start + page.len() < all.len();
    let path = format!("/v2/{name}/tags/list");
    let next = page
        .last()
        .filter(|_| more)
        .map(|l| (path.as_str(), n, l.as_str()));
    paginated(serde_json::json!({ "name": name, "tags": page }), next)
}

fn unsupported() -> Result<Response> {
    Err(RegistryError::new(
        Code::Unsupported,
        "method not supported on this endpoint",
    ))
}

/// `n` and `last` of a paginated list; `n` defaults to everything.
fn page(req: &Request) -> Result<(usize, Option<String>)> {
    let n = match query_param(req, "n") {
        Some(v) => v.parse().map_err(|_| {
            RegistryError::new(Code::SizeInvalid, format!("n={v:?} is not a number"))
        })?,
        None => usize::MAX,
    };
    Ok((n, query_param(req, "last")))
}

/// A JSON list with the `Link` to its next page when there is one.
fn paginated(body: Value, next: Option<(&str, usize, &str)>) -> Response {
    let mut resp = Json(body).into_response();
    if let Some((path, n, last)) = next {
        let link = format!("<{path}?n={n}&last={last}>; rel=\"next\"");
        resp.headers_mut().insert(header::LINK, hv(&link));
    }
    resp
}

/// The repositories the caller may pull, `n` at a time: pages of the
/// whole catalog are read until `n` of them pass or it ends.
async fn catalog(
    app: &App,
    n: usize,
    mut last: Option<String>,
    caller: crate::auth::Caller,
) -> Result<Response> {
    let mut repos = Vec::new();
    let mut more;
    loop {
        let from = last.take();
        let (page, m) = crate::service::manifests::catalog(app, from, n).await?;
        more = m;
        last = page.last().cloned();
        let mut page = page.into_iter();
        for r in page.by_ref() {
            if caller.sees(&r) {
                repos.push(r);
                if repos.len() == n {
                    break;
                }
            }
        }
        if repos.len() == n {
            more |= page.next().is_some();
            break;
        }
        if !more || last.is_none() {
            break;
        }
    }
    let next = repos
        .last()
        .filter(|_| more)
        .map(|l| ("/v2/_catalog", n, l.as_str()));
    Ok(paginated(
        serde_json::json!({ "repositories": repos }),
        next,
    ))
}

async fn tags(app: &App, name: String, n: usize, last: Option<String>) -> Result<Response> {
    let (exists, (tags, more)) = crate::service::manifests::tags(app, &name, last, n).await?;
    if !exists {
        return Err(RegistryError::new(
            Code::NameUnknown,
            format!("repository {name} is not known"),
        ));
    }
    let path = format!("/v2/{name}/tags/list");
    let next = tags
        .last()
        .filter(|_| more)
        .map(|l| (path.as_str(), n, l.as_str()));
    Ok(paginated(
        serde_json::json!({ "name": name, "tags": tags }),
        next,
    ))
}

/// The referrers API's answer: an image index of `found`, saying that the
/// `artifactType` filter was applied when one was asked for.
fn referrers(found: Vec<sealvol_spec::oci::OciDescriptor>, filtered: bool) -> Result<Response> {
    let index = sealvol_spec::oci::referrers_index(found)
        .map_err(|e| RegistryError::internal(format!("the referrers list: {e}")))?;
    let mut resp = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(OCI_INDEX))],
        Bytes::from(index),
    )
        .into_response();
    if filtered {
        resp.headers_mut().insert(
            "oci-filters-applied",
            HeaderValue::from_static("artifactType"),
        );
    }
    Ok(resp)
}
