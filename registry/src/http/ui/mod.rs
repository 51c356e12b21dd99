//! The registry's web view, served at `/ui/` by `sealvol serve` itself:
//! volumes, versions, a version's files with the commands to use it,
//! diffs, storage statistics and sync jobs, and the few actions the
//! caller's rights allow (move a tag, delete and restore a version, start
//! and cancel a sync).
//!
//! Pages are rendered on the server with `maud` (templates checked by the
//! compiler, every value escaped), from the same services the `/api/v1`
//! handlers call, so the view cannot show what the API would not. Actions
//! are plain HTML forms; the few things a script does (copy buttons) are
//! in `assets/app.js`, served from here with the stylesheet, so the pages
//! run under `Content-Security-Policy: default-src 'self'` with no inline
//! script or style. Nothing is fetched from elsewhere at run time.
//!
//! Who may see and do what is the auth layer's business, as for the API:
//! [`crate::http::access::need`] maps each `/ui` route to the action it needs, and a forged
//! form post is refused there (its Origin is checked, and the session
//! cookie is `SameSite=Strict`). With authentication on, the login form
//! trades a user's password (or an API key's secret) for a session cookie
//! (`session`).

mod pages;
mod reply;
pub(crate) mod session;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, MethodRouter};
use axum::Router;
use sealvol_spec::api::{self};

use crate::auth::Caller;
use crate::error::{RegistryError, Result};
use crate::http::query::{param, Page};
use crate::http::routes::{split_web_volume, WebSub};
use crate::state::app::App;
use reply::{error_page, field, form, html, see_other};

/// Volumes, versions and entries per page.
const PAGE: usize = 100;

/// The web view's routes. A method a page does not take answers the
/// view's own 405 page, a path it lacks its 404 page.
pub fn router() -> Router<Arc<App>> {
    let r = |m: MethodRouter<Arc<App>>| m.fallback(method_not_allowed);
    Router::new()
        .route("/ui", r(get(|| async { see_other("/ui/") })))
        .route("/ui/", r(get(volumes)))
        .route(
            "/ui/static/app.css",
            r(get(|| asset("text/css", include_str!("assets/app.css")))),
        )
        .route(
            "/ui/static/app.js",
            r(get(|| {
                asset("text/javascript", include_str!("assets/app.js"))
            })),
        )
        .route(
            "/ui/static/icon.svg",
            r(get(|| {
                asset("image/svg+xml", include_str!("assets/icon.svg"))
            })),
        )
        .route(
            "/ui/login",
            r(get(session::login_form).post(session::login)),
        )
        .route("/ui/logout", r(post(session::logout)))
        .route("/ui/syncs", r(get(syncs).post(start_sync)))
        .route("/ui/syncs/{id}", r(get(sync)))
        .route("/ui/syncs/{id}/cancel", r(post(cancel_sync)))
        .route("/ui/volumes/{*path}", r(get(volume_get).post(volume_post)))
        .route("/ui/{*rest}", any(not_found))
}

/// A `/ui` path parameter, percent-decoded. One that does not decode (not
/// UTF-8) is answered with the view's own 400 page rather than axum's
/// plain-text rejection.
struct ViewPath(String);

impl<S: Send + Sync> FromRequestParts<S> for ViewPath {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> std::result::Result<ViewPath, Response> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(p)) => Ok(ViewPath(p)),
            Err(e) => {
                let Ok(caller) = Caller::from_request_parts(parts, state).await;
                let who = pages::Who::of(&caller, None);
                let bad = RegistryError::new(api::ErrorCode::Invalid, e.body_text());
                Err(error_page(&who, bad))
            }
        }
    }
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn method_not_allowed(caller: Caller) -> Response {
    let who = pages::Who::of(&caller, None);
    let status = StatusCode::METHOD_NOT_ALLOWED;
    html(
        status,
        pages::error(&who, status, "this page does not take that method"),
    )
}

async fn not_found(caller: Caller) -> Response {
    let who = pages::Who::of(&caller, None);
    html(
        StatusCode::NOT_FOUND,
        pages::error(&who, StatusCode::NOT_FOUND, "no such page"),
    )
}

/// The host the browser reached the registry by, which the commands a
/// page shows name.
fn host_of(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("localhost")
        .to_string()
}

/// `GET /ui/`: the volumes the caller may pull, filtered by `q`.
async fn volumes(State(app): State<Arc<App>>, caller: Caller, RawQuery(q): RawQuery) -> Response {
    let who = pages::Who::of(&caller, None);
    let filter = param(q.as_deref(), "q").unwrap_or_default();
    let page = Page {
        n: Some(PAGE),
        last: param(q.as_deref(), "last").filter(|l| !l.is_empty()),
    };
    let result = crate::service::volumes::list(&app, None).await;
    match result {
        Ok(mut all) => {
            all.retain(|v| caller.sees(&v.name));
            // By name, so each namespace's volumes are together.
            let mut namespaces: Vec<String> = all.iter().map(|v| v.namespace.clone()).collect();
            namespaces.sort();
            namespaces.dedup();
            all.retain(|v| v.name.contains(filter.as_str()));
            let (shown, next) = page.take(all, |v| v.name.clone(), true);
            html(
                StatusCode::OK,
                pages::volumes(&who, &filter, &namespaces, &shown, next.as_deref()),
            )
        }
        Err(e) => error_page(&who, e),
    }
}

/// `GET /ui/volumes/NAME[/-/…]`.
async fn volume_get(
    State(app): State<Arc<App>>,
    caller: Caller,
    ViewPath(path): ViewPath,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (name, sub) = split_web_volume(&path);
    let who = pages::Who::of(&caller, Some(&name));
    let result = match sub {
        WebSub::Volume => volume_page(&app, &who, &name, q.as_deref()).await,
        WebSub::Version(d) => {
            version_page(&app, &who, &name, &d, q.as_deref(), &host_of(&headers)).await
        }
        WebSub::Delete(d) => confirm_delete(&app, &who, &name, &d).await,
        WebSub::Diff => diff_page(&app, &who, &name, q.as_deref()).await,
        WebSub::Restore(_) | WebSub::Tags | WebSub::Unknown => Err(RegistryError::with_status(
            api::ErrorCode::Unsupported,
            StatusCode::NOT_FOUND,
            "no such page",
        )),
    };
    result.unwrap_or_else(|e| error_page(&who, e))
}

fn checked_name(name: &str) -> Result<()> {
    crate::service::volumes::check_volume_name(name)
}

fn checked_digest(d: &str) -> Result<String> {
    let v: crate::http::extract::VersionDigest = d.parse()?;
    Ok(v.as_str().to_string())
}

async fn volume_page(app: &App, who: &pages::Who, name: &str, q: Option<&str>) -> Result<Response> {
    checked_name(name)?;
    let volume = crate::service::volumes::get(app, name).await?;
    let versions = crate::service::volumes::versions(app, name, true).await?;
    let stats = crate::service::volumes::volume_stats(app, name).await?;
    let page = Page {
        n: Some(PAGE),
        last: param(q, "last").filter(|l| !l.is_empty()),
    };
    let (shown, next) = page.take(versions, |v| v.digest.to_string(), false);
    Ok(html(
        StatusCode::OK,
        pages::volume(who, &volume, &stats, &shown, next.as_deref(), app.now()),
    ))
}

async fn version_page(
    app: &App,
    who: &pages::Who,
    name: &str,
    digest: &str,
    q: Option<&str>,
    host: &str,
) -> Result<Response> {
    checked_name(name)?;
    let digest = checked_digest(digest)?;
    let version = crate::service::volumes::version(app, name, &digest).await?;
    let tree = crate::service::trees::tree_of(app, name, &digest).await?;
    let dir = param(q, "path").unwrap_or_default();
    let page = Page {
        n: Some(PAGE),
        last: param(q, "last").filter(|l| !l.is_empty()),
    };
    let (entries, next) = page.take(
        crate::service::trees::entries_in(&tree, &dir)?,
        |e| e.path.clone(),
        false,
    );
    let d = version.digest.to_string();
    let others = crate::service::volumes::versions(app, name, false)
        .await?
        .into_iter()
        .filter(|v| v.digest.to_string() != d)
        .collect::<Vec<_>>();
    Ok(html(
        StatusCode::OK,
        pages::version(&pages::VersionView {
            who,
            host,
            name,
            version: &version,
            stats: &tree.stats(),
            dir: dir.trim_matches('/'),
            entries: &entries,
            next: next.as_deref(),
            others: &others,
        }),
    ))
}

async fn confirm_delete(app: &App, who: &pages::Who, name: &str, digest: &str) -> Result<Response> {
    checked_name(name)?;
    let digest = checked_digest(digest)?;
    let retention = app.lifetimes.retention_seconds;
    let version = crate::service::volumes::version(app, name, &digest).await?;
    Ok(html(
        StatusCode::OK,
        pages::confirm_delete(who, name, &version, retention),
    ))
}

async fn diff_page(app: &App, who: &pages::Who, name: &str, q: Option<&str>) -> Result<Response> {
    checked_name(name)?;
    let (a, b) = (
        param(q, "a").unwrap_or_default(),
        param(q, "b").unwrap_or_default(),
    );
    let (a, b) = (checked_digest(&a)?, checked_digest(&b)?);
    let (ta, tb) = futures_util::try_join!(
        crate::service::trees::tree_of(app, name, &a),
        crate::service::trees::tree_of(app, name, &b)
    )?;
    let (na, nb) = (a.clone(), b.clone());
    let diff = tokio::task::spawn_blocking(move || sealvol_spec::diff::diff(na, &ta, nb, &tb))
        .await
        .map_err(RegistryError::internal)?;
    Ok(html(StatusCode::OK, pages::diff(who, name, &a, &b, &diff)))
}

/// `POST /ui/volumes/NAME/-/…`: the volume actions.
async fn volume_post(
    State(app): State<Arc<App>>,
    caller: Caller,
    ViewPath(path): ViewPath,
    body: Body,
) -> Response {
    let (name, sub) = split_web_volume(&path);
    let who = pages::Who::of(&caller, Some(&name));
    let result = volume_action(&app, &name, sub, body).await;
    result.unwrap_or_else(|e| error_page(&who, e))
}

async fn volume_action(app: &App, name: &str, sub: WebSub, body: Body) -> Result<Response> {
    checked_name(name)?;
    let back = format!("/ui/volumes/{}", crate::http::query::encode(name));
    match sub {
        WebSub::Tags => {
            let fields = form(body).await?;
            let tag = field(&fields, "tag");
            let digest = checked_digest(&field(&fields, "digest"))?;
            tag.parse::<sealvol_spec::Tag>()
                .map_err(|e| RegistryError::new(api::ErrorCode::Invalid, e.to_string()))?;
            crate::service::volumes::set_tag(app, name, &tag, &digest, None).await?;
            Ok(see_other(&back))
        }
        WebSub::Delete(d) => {
            let d = checked_digest(&d)?;
            crate::service::volumes::delete_version(app, name, &d).await?;
            Ok(see_other(&back))
        }
        WebSub::Restore(d) => {
            let d = checked_digest(&d)?;
            // As the API's restore: wait for a sweep in progress.
            let _sweep = app.sweep.read().await;
            crate::service::volumes::restore_version(app, name, &d).await?;
            Ok(see_other(&back))
        }
        _ => Err(RegistryError::with_status(
            api::ErrorCode::Unsupported,
            StatusCode::METHOD_NOT_ALLOWED,
            "nothing to post here",
        )),
    }
}

/// `GET /ui/syncs`: the caller's sync schedules with their last runs, then
/// the caller's sync jobs, newest first.
async fn syncs(State(app): State<Arc<App>>, caller: Caller) -> Response {
    let who = pages::Who::of(&caller, None);
    let listed = async {
        let schedules = crate::service::syncs::schedules::list(&app, &caller, None).await?;
        let jobs = crate::service::syncs::jobs::list(&app, &caller, None).await?;
        Ok::<_, RegistryError>((schedules, jobs))
    };
    match listed.await {
        Ok((schedules, list)) => html(
            StatusCode::OK,
            pages::syncs(&who, &schedules.schedules, &list.syncs),
        ),
        Err(e) => error_page(&who, e),
    }
}

/// `GET /ui/syncs/ID`: one job, the page refreshing until it ends.
async fn sync(State(app): State<Arc<App>>, caller: Caller, ViewPath(id): ViewPath) -> Response {
    let who = pages::Who::of(&caller, None);
    match crate::service::syncs::jobs::describe(&app, &caller, &id).await {
        Ok(job) => {
            let who = pages::Who::of(&caller, Some(&job.dest.name));
            html(StatusCode::OK, pages::sync(&who, &job))
        }
        Err(e) => error_page(&who, e),
    }
}

/// `POST /ui/syncs`: a new job from the form.
async fn start_sync(State(app): State<Arc<App>>, caller: Caller, body: Body) -> Response {
    let who = pages::Who::of(&caller, None);
    let result = async {
        let fields = form(body).await?;
        let tag = Some(field(&fields, "tag")).filter(|t| !t.is_empty());
        let secret = Some(field(&fields, "secret"))
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<api::SecretName>())
            .transpose()
            .map_err(|e| RegistryError::new(api::ErrorCode::Invalid, e.to_string()))?;
        let req = api::SyncRequest {
            source: field(&fields, "source"),
            dest: api::SyncDest {
                name: field(&fields, "dest"),
                tag,
            },
            include: Vec::new(),
            exclude: Vec::new(),
            secret,
        };
        checked_name(&req.dest.name)?;
        let job = crate::service::syncs::jobs::create(&app, &caller, req).await?;
        Ok::<_, RegistryError>(see_other(&format!("/ui/syncs/{}", job.id)))
    }
    .await;
    result.unwrap_or_else(|e| error_page(&who, e))
}

/// `POST /ui/syncs/ID/cancel`.
async fn cancel_sync(
    State(app): State<Arc<App>>,
    caller: Caller,
    ViewPath(id): ViewPath,
) -> Response {
    let who = pages::Who::of(&caller, None);
    match crate::service::syncs::jobs::cancel(&app, &caller, id.clone()).await {
        Ok(_) => see_other(&format!("/ui/syncs/{}", crate::http::query::encode(&id))),
        Err(e) => error_page(&who, e),
    }
}
