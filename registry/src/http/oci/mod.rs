//! The OCI Distribution v1.1 HTTP API. Repository names hold slashes, so
//! one handler parses `/v2/...` paths from the end (as distribution's
//! router does) and each endpoint is a function that reads like its
//! paragraph of the spec, returning `Result<Response, RegistryError>`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sealvol_spec::Sha256Digest;
use serde_json::Value;

use crate::error::{Code, RegistryError, Result};
use crate::http::routes::Oci;
use crate::service::blobs::BlobBody;
use crate::service::manifests::{check_tag, parse_digest, store_manifest, MAX_MANIFEST, OCI_INDEX};
use crate::state::app::App;

fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= sealvol_spec::reference::MAX_NAME_LEN
        && name
            .split('/')
            .all(sealvol_spec::reference::is_name_component);
    if ok {
        Ok(())
    } else {
        Err(RegistryError::new(
            Code::NameInvalid,
            format!("invalid repository name {name:?}"),
        ))
    }
}

fn query_param(req: &Request, key: &str) -> Option<String> {
    crate::http::query::param(req.uri().query(), key)
}

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The one handler behind every `/v2` path.
pub async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    let result = match crate::http::routes::oci(req.uri().path()) {
        None => Err(RegistryError::with_status(
            Code::Unsupported,
            StatusCode::NOT_FOUND,
            "no such endpoint",
        )),
        Some(r) => handle(app, r, req).await,
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn handle(app: Arc<App>, route: Oci, req: Request) -> Result<Response> {
    match app.upstream.clone() {
        Some(up) => handle_cached(app, &up, route, req).await,
        None => handle_direct(app, route, req).await,
    }
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
            check_name(&name)?;
            let (n, last) = page(&req)?;
            tags(&app, name, n, last).await
        }
        Oci::Manifest(name, reference) => {
            check_name(&name)?;
            match method {
                Method::GET | Method::HEAD => {
                    get_manifest(&app, name, reference, method == Method::HEAD).await
                }
                Method::PUT => put_manifest(&app, name, reference, req).await,
                Method::DELETE => delete_manifest(&app, name, reference).await,
                _ => unsupported(),
            }
        }
        Oci::Blob(name, digest) => {
            check_name(&name)?;
            let digest = parse_digest(&digest)?;
            match method {
                Method::GET | Method::HEAD => {
                    get_blob(&app, name, digest, req.headers(), method == Method::HEAD).await
                }
                Method::DELETE => delete_blob(&app, name, digest).await,
                _ => unsupported(),
            }
        }
        Oci::UploadStart(name) if method == Method::POST => {
            check_name(&name)?;
            start_upload(&app, name, req).await
        }
        Oci::Upload(name, id) => {
            check_name(&name)?;
            check_session(&app, &name, &id).await?;
            match method {
                Method::GET => upload_status(&app, name, id).await,
                Method::PATCH => patch_upload(&app, name, id, req).await,
                Method::PUT => put_upload(&app, name, id, req).await,
                Method::DELETE => cancel_upload(&app, id).await,
                _ => unsupported(),
            }
        }
        Oci::Referrers(name, digest) if method == Method::GET => {
            check_name(&name)?;
            let filter = query_param(&req, "artifactType");
            referrers(&app, name, parse_digest(&digest)?, filter).await
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
            check_name(&name)?;
            let _pin = cache::manifest(&app, up, &name, &reference).await?;
            get_manifest(&app, name, reference, method == Method::HEAD).await
        }
        Oci::Blob(name, digest) if read => {
            check_name(&name)?;
            let digest = parse_digest(&digest)?;
            let pin = cache::blob(&app, up, &name, &digest).await?;
            up.used(&digest, app.now());
            // The body holds its bytes already (a mapping, or a stream the
            // store keeps serving): eviction may go on once it is made.
            let resp = get_blob(&app, name, digest, req.headers(), method == Method::HEAD).await;
            drop(pin);
            cache::settle(&app, up).await;
            resp
        }
        Oci::Tags(name) if method == Method::GET => {
            check_name(&name)?;
            let (n, last) = page(&req)?;
            match cache::tags(up, &name).await {
                Some(all) => Ok(tag_page(&name, all, n, last)),
                None => tags(&app, name, n, last).await,
            }
        }
        Oci::Manifest(..) | Oci::Blob(..) | Oci::UploadStart(_) | Oci::Upload(..) => {
            Err(cache::refuse_write(up))
        }
        Oci::Base | Oci::Catalog | Oci::Referrers(..) => {
            // What is cached: the base, the catalog, the referrers.
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

struct Json(Value);

impl IntoResponse for Json {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
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
        let (page, m) = app
            .meta(move |meta| meta.catalog(from.as_deref(), n))
            .await?;
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
    let repo = name.clone();
    let (exists, (tags, more)) = app
        .meta(move |m| {
            Ok::<_, RegistryError>((m.repo_exists(&repo)?, m.tags(&repo, last.as_deref(), n)?))
        })
        .await?;
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

/// A manifest reference: a digest, or a tag resolved to one. A reference
/// that is neither names no manifest: 404, as distribution answers, since
/// clients and conformance suites probe with such names (a PUT to one is
/// still refused as invalid, by `store_manifest`).
async fn resolve(app: &App, name: &str, reference: &str) -> Result<Sha256Digest> {
    let malformed = || {
        RegistryError::new(
            Code::ManifestUnknown,
            format!("{reference:?} is neither a tag nor a digest, so no manifest of {name}"),
        )
    };
    if reference.contains(':') {
        return parse_digest(reference).map_err(|_| malformed());
    }
    check_tag(reference).map_err(|_| malformed())?;
    let (repo, tag) = (name.to_string(), reference.to_string());
    match app.meta(move |m| m.resolve_tag(&repo, &tag)).await? {
        Some(d) => parse_digest(&d),
        None => Err(RegistryError::new(
            Code::ManifestUnknown,
            format!("tag {reference} is not known in {name}"),
        )),
    }
}

async fn get_manifest(app: &App, name: String, reference: String, head: bool) -> Result<Response> {
    let digest = resolve(app, &name, &reference).await?;
    let (repo, d) = (name.clone(), digest.to_string());
    let record = app
        .meta(move |m| m.manifest(&repo, &d))
        .await?
        .ok_or_else(|| {
            RegistryError::new(
                Code::ManifestUnknown,
                format!("manifest {reference} is not known in {name}"),
            )
        })?;
    let mut resp = if head {
        Response::new(Body::empty())
    } else {
        let bytes = app.blobs.get(&digest).await?.ok_or_else(|| {
            RegistryError::internal(format!("manifest {digest} is recorded but not stored"))
        })?;
        Response::new(Body::from(bytes))
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, hv(&record.media_type));
    h.insert(header::CONTENT_LENGTH, hv(&record.size.to_string()));
    h.insert("docker-content-digest", hv(&digest.to_string()));
    Ok(resp)
}

async fn put_manifest(
    app: &App,
    name: String,
    reference: String,
    req: Request,
) -> Result<Response> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or(s).trim().to_string())
        .filter(|s| s.starts_with("application/vnd."));
    let bytes =
        crate::http::extract::read_body(req.into_body(), MAX_MANIFEST, Code::ManifestInvalid)
            .await?;
    let (digest, subject) =
        store_manifest(app, &name, &reference, bytes, content_type.as_deref()).await?;

    let mut resp = StatusCode::CREATED.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::LOCATION,
        hv(&format!("/v2/{name}/manifests/{digest}")),
    );
    h.insert("docker-content-digest", hv(&digest.to_string()));
    if let Some(s) = subject {
        h.insert("oci-subject", hv(&s.to_string()));
    }
    Ok(resp)
}

async fn delete_manifest(app: &App, name: String, reference: String) -> Result<Response> {
    let (repo, r) = (name.clone(), reference.clone());
    let deleted = if reference.contains(':') {
        parse_digest(&reference)?;
        let now = app.now();
        app.meta(move |m| m.delete_manifest(&repo, &r, now)).await?
    } else {
        let now = app.now();
        app.meta(move |m| m.delete_tag(&repo, &r, now)).await?
    };
    if !deleted {
        return Err(RegistryError::new(
            Code::ManifestUnknown,
            format!("{reference} is not known in {name}"),
        ));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// A single byte range of a `size`-byte blob: `Ok(None)` for no (or an
/// unsupported multi-range) header, `Err` when it lies past the end.
#[doc(hidden)] // pub for the fuzz targets (fuzz/)
#[allow(clippy::result_unit_err)]
pub fn byte_range(headers: &HeaderMap, size: u64) -> std::result::Result<Option<(u64, u64)>, ()> {
    let Some(spec) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
    else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", suffix) => {
            let n: u64 = suffix.parse().map_err(|_| ())?;
            if n == 0 {
                return Err(());
            }
            (size.saturating_sub(n), size.checked_sub(1).ok_or(())?)
        }
        (s, "") => (s.parse().map_err(|_| ())?, size.checked_sub(1).ok_or(())?),
        (s, e) => {
            let (s, e): (u64, u64) = (s.parse().map_err(|_| ())?, e.parse().map_err(|_| ())?);
            if e < s {
                return Err(());
            }
            (s, e.min(size.saturating_sub(1)))
        }
    };
    if start >= size {
        return Err(());
    }
    Ok(Some((start, end)))
}

async fn get_blob(
    app: &App,
    name: String,
    digest: Sha256Digest,
    headers: &HeaderMap,
    head: bool,
) -> Result<Response> {
    let (repo, d) = (name.clone(), digest.to_string());
    let linked = if head {
        // A push that finds a blob with HEAD skips uploading it and
        // references it later: the check renews the link for garbage
        // collection, with this replica's sweep held off meanwhile.
        let _sweep = app.sweep.read().await;
        crate::service::links::check_blob(app, &repo, &d).await?
    } else {
        app.meta(move |m| m.blob_size(&repo, &d)).await?
    };
    let size = match linked {
        Some(_) => app.blobs.size(&digest).await?,
        None => None,
    };
    let Some(size) = size else {
        return Err(RegistryError::new(
            Code::BlobUnknown,
            format!("blob {digest} is not in {name}"),
        ));
    };
    let range = match byte_range(headers, size) {
        Ok(r) => r,
        Err(()) => {
            // The spec defines no error code for a bad range; its body is
            // an error body all the same, as every 4xx here.
            let mut resp = RegistryError::with_status(
                Code::SizeInvalid,
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!("the Range asked for lies outside the blob's {size} bytes"),
            )
            .into_response();
            resp.headers_mut()
                .insert(header::CONTENT_RANGE, hv(&format!("bytes */{size}")));
            return Ok(resp);
        }
    };
    let (start, len, status) = match range {
        Some((s, e)) => (s, e - s + 1, StatusCode::PARTIAL_CONTENT),
        None => (0, size, StatusCode::OK),
    };
    // With `[storage] redirect` the bytes come from the bucket: the client
    // repeats its GET (and Range) there. HEAD stays here.
    if !head {
        if let Some(url) = crate::service::blobs::redirect_url(app, &digest).await? {
            let mut resp = StatusCode::TEMPORARY_REDIRECT.into_response();
            let h = resp.headers_mut();
            h.insert(header::LOCATION, hv(&url));
            h.insert("docker-content-digest", hv(&digest.to_string()));
            return Ok(resp);
        }
    }
    let body = if head {
        Body::empty()
    } else {
        match crate::service::blobs::body(app, &digest, start, len).await? {
            Some(BlobBody::Bytes(b)) => Body::from(b),
            Some(BlobBody::Stream(r)) => {
                Body::from_stream(tokio_util::io::ReaderStream::with_capacity(r, 1 << 20))
            }
            None => {
                return Err(RegistryError::new(
                    Code::BlobUnknown,
                    format!("blob {digest} is not stored"),
                ))
            }
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, hv(&len.to_string()));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert("docker-content-digest", hv(&digest.to_string()));
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(
            header::CONTENT_RANGE,
            hv(&format!("bytes {start}-{}/{size}", start + len - 1)),
        );
    }
    Ok(resp)
}

async fn delete_blob(app: &App, name: String, digest: Sha256Digest) -> Result<Response> {
    let (repo, d) = (name.clone(), digest.to_string());
    if !app.meta(move |m| m.unlink_blob(&repo, &d)).await? {
        return Err(RegistryError::new(
            Code::BlobUnknown,
            format!("blob {digest} is not in {name}"),
        ));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

fn upload_response(status: StatusCode, name: &str, id: &str, size: u64) -> Response {
    let mut resp = status.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::LOCATION,
        hv(&format!("/v2/{name}/blobs/uploads/{id}")),
    );
    h.insert(header::RANGE, hv(&format!("0-{}", size.saturating_sub(1))));
    h.insert("docker-upload-uuid", hv(id));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    resp
}

fn blob_created(name: &str, digest: &Sha256Digest) -> Response {
    let mut resp = StatusCode::CREATED.into_response();
    let h = resp.headers_mut();
    h.insert(header::LOCATION, hv(&format!("/v2/{name}/blobs/{digest}")));
    h.insert("docker-content-digest", hv(&digest.to_string()));
    resp
}

async fn start_upload(app: &App, name: String, req: Request) -> Result<Response> {
    // Cross-repository mount: link a blob the caller can see elsewhere.
    if let Some(mount) = query_param(&req, "mount") {
        let digest = parse_digest(&mount)?;
        if let Some(from) = query_param(&req, "from") {
            check_name(&from)?;
            let (repo, d) = (name.clone(), digest.to_string());
            let _sweep = app.sweep.read().await;
            let mark = crate::service::links::sweep_mark(app).await?;
            let size = app.meta(move |m| m.blob_size(&from, &d)).await?;
            if let (Some(size), Some(_)) = (size, app.blobs.size(&digest).await?) {
                let (d, now) = (digest.to_string(), app.now());
                app.meta(move |m| m.link_blob(&repo, &d, size, now)).await?;
                // Linked: not held while waiting out another replica's sweep.
                drop(_sweep);
                if crate::service::links::settle(app, mark, &[digest])
                    .await?
                    .is_empty()
                {
                    return Ok(blob_created(&name, &digest));
                }
                unlink_lost(app, &name, &digest).await?;
            }
        }
        // Not visible: fall back to a fresh upload session (202).
    } else if let Some(d) = query_param(&req, "digest") {
        // Monolithic upload: the whole blob in this request.
        let digest = parse_digest(&d)?;
        return monolithic(app, name, digest, req.into_body()).await;
    }
    let id = crate::service::uploads::start(app, &name).await?;
    Ok(upload_response(StatusCode::ACCEPTED, &name, &id, 0))
}

async fn monolithic(app: &App, name: String, digest: Sha256Digest, body: Body) -> Result<Response> {
    let id = app.uploads.create().await?;
    let result = async {
        let session = app.uploads.session(&id).await?;
        let mut session = session.lock().await;
        let size = (app.uploads)
            .append(&id, &mut session, None, body.into_data_stream())
            .await?;
        let got = app.uploads.digest(&id, &mut session).await?;
        if got != digest {
            return Err(RegistryError::new(
                Code::DigestInvalid,
                format!("uploaded bytes hash to {got}, not {digest}"),
            ));
        }
        let _sweep = app.sweep.read().await;
        let mark = crate::service::links::sweep_mark(app).await?;
        app.uploads.commit(&id, &digest).await?;
        let (repo, d, now) = (name.clone(), digest.to_string(), app.now());
        app.meta(move |m| m.link_blob(&repo, &d, size, now)).await?;
        settle_upload(app, mark, &name, &digest).await
    }
    .await;
    app.uploads.remove(&id).await;
    result?;
    Ok(blob_created(&name, &digest))
}

/// An upload id must name a session of this repository.
async fn check_session(app: &App, name: &str, id: &str) -> Result<()> {
    let i = id.to_string();
    match app.meta(move |m| m.upload_repo(&i)).await? {
        Some(repo) if repo == name => Ok(()),
        _ => Err(RegistryError::new(
            Code::BlobUploadUnknown,
            format!("upload {id} is not known in {name}"),
        )),
    }
}

async fn upload_status(app: &App, name: String, id: String) -> Result<Response> {
    let s = app.uploads.session(&id).await?;
    let mut s = s.lock().await;
    if s.expired {
        return Err(RegistryError::new(
            Code::BlobUploadUnknown,
            format!("upload {id} expired; start the upload again"),
        ));
    }
    app.uploads.refresh(&id, &mut s).await?;
    let size = s.size;
    Ok(upload_response(StatusCode::NO_CONTENT, &name, &id, size))
}

/// `Content-Range: <start>-<end>` of a chunk, if given.
#[doc(hidden)] // pub for the fuzz targets (fuzz/)
pub fn chunk_start(headers: &HeaderMap) -> Result<Option<u64>> {
    let Some(v) = headers.get(header::CONTENT_RANGE) else {
        return Ok(None);
    };
    let v = v.to_str().unwrap_or("");
    let v = v.strip_prefix("bytes ").unwrap_or(v);
    let bad = || {
        RegistryError::with_status(
            Code::BlobUploadInvalid,
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("Content-Range {v:?} is not <start>-<end>"),
        )
    };
    let (a, b) = v.split_once('-').ok_or_else(bad)?;
    let (a, b): (u64, u64) = (
        a.parse().map_err(|_| bad())?,
        b.split('/')
            .next()
            .unwrap_or("")
            .parse()
            .map_err(|_| bad())?,
    );
    if b < a {
        return Err(bad());
    }
    Ok(Some(a))
}

/// Appends the request body to upload `id` at its `Content-Range`, and
/// keeps the session locked for the caller.
async fn append_body(
    app: &App,
    id: &str,
    req: Request,
) -> Result<(
    u64,
    tokio::sync::OwnedMutexGuard<crate::state::uploads::Session>,
)> {
    let start = chunk_start(req.headers())?;
    let mut session = app.uploads.session(id).await?.lock_owned().await;
    crate::service::uploads::touch(app, id).await?;
    let size = app
        .uploads
        .append(id, &mut session, start, req.into_body().into_data_stream())
        .await?;
    Ok((size, session))
}

async fn patch_upload(app: &App, name: String, id: String, req: Request) -> Result<Response> {
    let (size, _session) = append_body(app, &id, req).await?;
    Ok(upload_response(StatusCode::ACCEPTED, &name, &id, size))
}

async fn put_upload(app: &App, name: String, id: String, req: Request) -> Result<Response> {
    let digest = parse_digest(&query_param(&req, "digest").ok_or_else(|| {
        RegistryError::new(Code::DigestInvalid, "completing an upload needs ?digest=")
    })?)?;
    let (size, mut session) = append_body(app, &id, req).await?;
    let got = app.uploads.digest(&id, &mut session).await?;
    if got != digest {
        drop(session);
        app.uploads.remove(&id).await;
        let i = id.clone();
        let now = app.now();
        app.meta(move |m| m.finish_upload(&i, None, now)).await?;
        return Err(RegistryError::new(
            Code::DigestInvalid,
            format!("uploaded bytes hash to {got}, not {digest}"),
        ));
    }
    let sweep = app.sweep.read().await;
    let mark = crate::service::links::sweep_mark(app).await?;
    app.uploads.commit(&id, &digest).await?;
    let (i, repo, d, now) = (id.clone(), name.clone(), digest.to_string(), app.now());
    app.meta(move |m| m.finish_upload(&i, Some((&repo, &d, size)), now))
        .await?;
    drop(session);
    // Linked: not held while waiting out another replica's sweep.
    drop(sweep);
    app.uploads.remove(&id).await;
    settle_upload(app, mark, &name, &digest).await?;
    Ok(blob_created(&name, &digest))
}

/// After an upload linked `digest` in `name`: an error, with the link
/// gone, if a sweep on another replica deleted the bytes as they were
/// stored (`sweeps`), which only a digest stored long before and
/// unreferenced since can meet. It is answered 503, which clients retry:
/// the same upload again succeeds, since that sweep is over.
async fn settle_upload(
    app: &App,
    mark: crate::service::links::SweepMark,
    name: &str,
    digest: &Sha256Digest,
) -> Result<()> {
    if crate::service::links::settle(app, mark, &[*digest])
        .await?
        .is_empty()
    {
        return Ok(());
    }
    unlink_lost(app, name, digest).await?;
    Err(RegistryError::with_status(
        Code::BlobUploadInvalid,
        StatusCode::SERVICE_UNAVAILABLE,
        format!("garbage collection deleted {digest} while it was stored; upload the blob again"),
    ))
}

/// Removes the link to `digest` in `name` whose bytes a sweep deleted.
async fn unlink_lost(app: &App, name: &str, digest: &Sha256Digest) -> Result<()> {
    let (repo, d) = (name.to_string(), digest.to_string());
    app.meta(move |m| m.unlink_blob(&repo, &d)).await?;
    Ok(())
}

async fn cancel_upload(app: &App, id: String) -> Result<Response> {
    let (i, now) = (id.clone(), app.now());
    app.meta(move |m| m.finish_upload(&i, None, now)).await?;
    app.uploads.remove(&id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn referrers(
    app: &App,
    name: String,
    subject: Sha256Digest,
    filter: Option<String>,
) -> Result<Response> {
    let (repo, s) = (name, subject.to_string());
    let rows = app.meta(move |m| m.referrers(&repo, &s)).await?;
    let mut manifests: Vec<Value> = rows
        .iter()
        .filter_map(|r| serde_json::from_str(r).ok())
        .collect();
    if let Some(t) = &filter {
        manifests.retain(|d| d.get("artifactType").and_then(Value::as_str) == Some(t.as_str()));
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": manifests,
    });
    let mut resp = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(OCI_INDEX))],
        Bytes::from(index.to_string()),
    )
        .into_response();
    if filter.is_some() {
        resp.headers_mut().insert(
            "oci-filters-applied",
            HeaderValue::from_static("artifactType"),
        );
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::RANGE, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(byte_range(&h("bytes=0-9"), 100), Ok(Some((0, 9))));
        assert_eq!(byte_range(&h("bytes=90-"), 100), Ok(Some((90, 99))));
        assert_eq!(byte_range(&h("bytes=-5"), 100), Ok(Some((95, 99))));
        assert_eq!(byte_range(&h("bytes=95-200"), 100), Ok(Some((95, 99))));
        assert_eq!(byte_range(&h("bytes=100-"), 100), Err(()));
        assert_eq!(byte_range(&h("bytes=9-0"), 100), Err(()));
        assert_eq!(byte_range(&HeaderMap::new(), 100), Ok(None));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any `Range` value is answered without panicking, and an answer
        /// lies inside the blob; a well-formed range comes back as asked.
        #[test]
        fn any_range_header_is_answered_within_the_blob(
            v in "(bytes=)?[0-9,\\- ]{0,24}",
            size in 0u64..1_000,
            a in 0u64..1_000,
            len in 1u64..1_000,
        ) {
            let mut h = HeaderMap::new();
            h.insert(header::RANGE, HeaderValue::from_str(&v).unwrap());
            if let Ok(Some((s, e))) = byte_range(&h, size) {
                proptest::prop_assert!(s <= e && e < size, "{v} on {size}: {s}-{e}");
            }
            let e = a + len - 1;
            h.insert(header::RANGE, HeaderValue::from_str(&format!("bytes={a}-{e}")).unwrap());
            let want = if a < size { Ok(Some((a, e.min(size - 1)))) } else { Err(()) };
            proptest::prop_assert_eq!(byte_range(&h, size), want);
        }
    }
}
