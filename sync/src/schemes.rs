//! Sources by URI scheme (SPEC.md §8.1): [`open`] sends each URI to the
//! module of its scheme. It sits above every source module, so none of
//! them imports the dispatch that opens it.

use crate::source::{Source, SourceOptions};
use crate::{ErrorKind, SyncError};

/// Opens the source `uri` names; fails with `INVALID_SOURCE` for a URI it
/// cannot use, before any request is made.
pub fn open(uri: &str, opts: &SourceOptions) -> Result<Box<dyn Source>, SyncError> {
    let scheme = uri.split_once("://").map(|(s, _)| s).ok_or_else(|| {
        SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: not a source URI; use hf://ORG/REPO, s3://BUCKET/PREFIX, gs://, azure://, r2://, cw://, dir:///PATH or oci://HOST/REPO:TAG"),
        )
    })?;
    match scheme {
        "hf" => Ok(Box::new(crate::hf::HfSource::new(uri, opts)?)),
        "s3" | "r2" | "cw" | "azure" => Ok(Box::new(crate::store::StoreSource::new(uri, opts)?)),
        "gs" => Ok(Box::new(crate::gcs::GcsSource::new(uri, opts)?)),
        "dir" => Ok(Box::new(crate::dir::DirSource::new(uri, opts)?)),
        "oci" => Ok(Box::new(crate::oci::OciSource::new(uri, opts)?)),
        other => Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: unknown scheme {other}://; use hf, s3, r2, cw, gs, azure, dir or oci"),
        )),
    }
}
