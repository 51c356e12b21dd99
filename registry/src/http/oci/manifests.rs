//! `/v2/NAME/manifests/REFERENCE`: GET, HEAD, PUT, DELETE (OCI
//! distribution spec, "Pulling manifests", "Pushing manifests", "Deleting").

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::Sha256Digest;

use crate::error::{Code, RegistryError, Result};
use crate::http::respond::hv;
use crate::service::manifests::{check_tag, parse_digest, store_manifest, MAX_MANIFEST};
use crate::state::app::App;

/// A manifest reference: a digest, or a tag resolved to one. A reference
/// that is neither names no manifest: 404, as distribution answers, since
/// clients and conformance suites probe with such names (a PUT to one is
/// still refused as invalid, by `store_manifest`).
pub(crate) async fn resolve(app: &App, name: &str, reference: &str) -> Result<Sha256Digest> {
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
    match crate::service::manifests::resolve_tag(app, name, reference).await? {
        Some(d) => parse_digest(&d),
        None => Err(RegistryError::new(
            Code::ManifestUnknown,
            format!("tag {reference} is not known in {name}"),
        )),
    }
}

pub(crate) async fn get_manifest(
    app: &App,
    name: String,
    reference: String,
    head: bool,
) -> Result<Response> {
    let digest = resolve(app, &name, &reference).await?;
    let record = crate::service::manifests::record(app, &name, &digest.to_string())
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
        let bytes = crate::service::blobs::get(app, &digest)
            .await?
            .ok_or_else(|| {
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

pub(crate) async fn put_manifest(
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

pub(crate) async fn delete_manifest(
    app: &App,
    name: String,
    reference: String,
) -> Result<Response> {
    let deleted = if reference.contains(':') {
        parse_digest(&reference)?;
        crate::service::manifests::delete(app, &name, &reference).await?
    } else {
        crate::service::manifests::delete_tag(app, &name, &reference).await?
    };
    if !deleted {
        return Err(RegistryError::new(
            Code::ManifestUnknown,
            format!("{reference} is not known in {name}"),
        ));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}
