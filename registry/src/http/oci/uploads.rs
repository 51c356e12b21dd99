//! `/v2/NAME/blobs/uploads/[ID]`: monolithic, chunked and resumable
//! uploads and cross-repository mounts (OCI distribution spec, "Pushing
//! blobs").

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::Sha256Digest;

use crate::error::{Code, RegistryError, Result};
use crate::http::extract::check_repository_name;
use crate::http::query::query_param;
use crate::http::respond::hv;
use crate::service::manifests::parse_digest;
use crate::state::app::App;

pub(crate) fn upload_response(status: StatusCode, name: &str, id: &str, size: u64) -> Response {
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

pub(crate) fn blob_created(name: &str, digest: &Sha256Digest) -> Response {
    let mut resp = StatusCode::CREATED.into_response();
    let h = resp.headers_mut();
    h.insert(header::LOCATION, hv(&format!("/v2/{name}/blobs/{digest}")));
    h.insert("docker-content-digest", hv(&digest.to_string()));
    resp
}

pub(crate) async fn start_upload(app: &App, name: String, req: Request) -> Result<Response> {
    // Cross-repository mount: link a blob the caller can see elsewhere.
    if let Some(mount) = query_param(&req, "mount") {
        let digest = parse_digest(&mount)?;
        if let Some(from) = query_param(&req, "from") {
            check_repository_name(&from)?;
            let _sweep = app.sweep.read().await;
            let mark = crate::service::links::sweep_mark(app).await?;
            let d = digest.to_string();
            let size = crate::service::blobs::linked_size(app, &from, &d).await?;
            let stored = crate::service::blobs::stored_size(app, &digest).await?;
            if let (Some(size), Some(_)) = (size, stored) {
                crate::service::blobs::link(app, &name, &d, size).await?;
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

pub(crate) async fn monolithic(
    app: &App,
    name: String,
    digest: Sha256Digest,
    body: Body,
) -> Result<Response> {
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
        crate::service::blobs::link(app, &name, &digest.to_string(), size).await?;
        settle_upload(app, mark, &name, &digest).await
    }
    .await;
    app.uploads.remove(&id).await;
    result?;
    Ok(blob_created(&name, &digest))
}

/// An upload id must name a session of this repository.
pub(crate) async fn check_session(app: &App, name: &str, id: &str) -> Result<()> {
    match crate::service::uploads::repo_of(app, id).await? {
        Some(repo) if repo == name => Ok(()),
        _ => Err(RegistryError::new(
            Code::BlobUploadUnknown,
            format!("upload {id} is not known in {name}"),
        )),
    }
}

pub(crate) async fn upload_status(app: &App, name: String, id: String) -> Result<Response> {
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
pub(crate) async fn append_body(
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

pub(crate) async fn patch_upload(
    app: &App,
    name: String,
    id: String,
    req: Request,
) -> Result<Response> {
    let (size, _session) = append_body(app, &id, req).await?;
    Ok(upload_response(StatusCode::ACCEPTED, &name, &id, size))
}

pub(crate) async fn put_upload(
    app: &App,
    name: String,
    id: String,
    req: Request,
) -> Result<Response> {
    let digest = parse_digest(&query_param(&req, "digest").ok_or_else(|| {
        RegistryError::new(Code::DigestInvalid, "completing an upload needs ?digest=")
    })?)?;
    let (size, mut session) = append_body(app, &id, req).await?;
    let got = app.uploads.digest(&id, &mut session).await?;
    if got != digest {
        drop(session);
        app.uploads.remove(&id).await;
        crate::service::uploads::finish(app, &id, None).await?;
        return Err(RegistryError::new(
            Code::DigestInvalid,
            format!("uploaded bytes hash to {got}, not {digest}"),
        ));
    }
    let sweep = app.sweep.read().await;
    let mark = crate::service::links::sweep_mark(app).await?;
    app.uploads.commit(&id, &digest).await?;
    let d = digest.to_string();
    crate::service::uploads::finish(app, &id, Some((&name, &d, size))).await?;
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
pub(crate) async fn settle_upload(
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
pub(crate) async fn unlink_lost(app: &App, name: &str, digest: &Sha256Digest) -> Result<()> {
    crate::service::blobs::unlink(app, name, &digest.to_string()).await?;
    Ok(())
}

pub(crate) async fn cancel_upload(app: &App, id: String) -> Result<Response> {
    crate::service::uploads::finish(app, &id, None).await?;
    app.uploads.remove(&id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
