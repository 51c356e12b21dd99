//! `/v2/NAME/blobs/DIGEST`: GET (with `Range`), HEAD, DELETE (OCI
//! distribution spec, "Pulling blobs", "Deleting blobs").

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sealvol_spec::Sha256Digest;

use crate::error::{Code, RegistryError, Result};
use crate::http::respond::hv;
use crate::service::blobs::BlobBody;
use crate::state::app::App;

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

pub(crate) async fn get_blob(
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
        crate::service::blobs::linked_size(app, &repo, &d).await?
    };
    let size = match linked {
        Some(_) => crate::service::blobs::stored_size(app, &digest).await?,
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

pub(crate) async fn delete_blob(app: &App, name: String, digest: Sha256Digest) -> Result<Response> {
    if !crate::service::blobs::unlink(app, &name, &digest.to_string()).await? {
        return Err(RegistryError::new(
            Code::BlobUnknown,
            format!("blob {digest} is not in {name}"),
        ));
    }
    Ok(StatusCode::ACCEPTED.into_response())
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
