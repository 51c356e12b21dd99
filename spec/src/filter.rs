//! Which paths of a tree go into a version: the include/exclude glob rules
//! that `push` applies to a folder and a sync job to a source's listing.

use std::path::Path;

use globset::{Glob, GlobSet, GlobSetBuilder};
use thiserror::Error;

/// A glob that does not parse.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid glob {glob:?}: {message}")]
pub struct GlobError {
    pub glob: String,
    pub message: String,
}

/// Globs match the path relative to the root, `*` crossing `/` as in
/// Hugging Face's `allow_patterns`. With no includes everything is
/// included; excludes always win, and an excluded directory is skipped
/// whole.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

fn build(globs: &[String]) -> Result<Option<GlobSet>, GlobError> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for g in globs {
        b.add(Glob::new(g).map_err(|e| GlobError {
            glob: g.clone(),
            message: e.kind().to_string(),
        })?);
    }
    b.build().map(Some).map_err(|e| GlobError {
        glob: globs.join(" "),
        message: e.to_string(),
    })
}

impl Filter {
    pub fn new(includes: &[String], excludes: &[String]) -> Result<Filter, GlobError> {
        Ok(Filter {
            include: build(includes)?,
            exclude: build(excludes)?,
        })
    }

    /// Paths are matched as paths, so even a name that is not UTF-8 can be
    /// excluded.
    pub fn excluded(&self, rel: impl AsRef<Path>) -> bool {
        self.exclude.as_ref().is_some_and(|g| g.is_match(rel))
    }

    pub fn included(&self, rel: impl AsRef<Path>) -> bool {
        let rel = rel.as_ref();
        !self.excluded(rel) && self.include.as_ref().is_none_or(|g| g.is_match(rel))
    }

    pub fn has_includes(&self) -> bool {
        self.include.is_some()
    }
}
