//! Paths inside a version: the normal form every entry path and ref path
//! takes, the canonical order of entries, and the lexical half of the rule
//! that keeps symlinks inside the volume (SPEC.md §2.2, §2.3 rule 5; the
//! half that needs the tree's other symlinks is in `tree`).

use std::cmp::Ordering;

use thiserror::Error;

/// Longest path accepted (Linux `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest path component accepted (Linux `NAME_MAX`).
pub const MAX_COMPONENT_LEN: usize = 255;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PathError {
    #[error("empty path")]
    Empty,
    #[error("path {0:?} is absolute; paths in a volume are relative to its root")]
    Absolute(String),
    #[error("path {0:?} contains a '..' component")]
    DotDot(String),
    #[error("path {0:?} is not normalized (empty or '.' component, or trailing '/')")]
    NotNormal(String),
    #[error("path {0:?} contains a NUL byte")]
    Nul(String),
    #[error("path {0:?} is too long (at most 4096 bytes, 255 per component)")]
    TooLong(String),
}

/// Checks that `p` is a normalized relative path (SPEC.md §2.2).
pub fn validate(p: &str) -> Result<(), PathError> {
    if p.is_empty() {
        return Err(PathError::Empty);
    }
    if p.contains('\0') {
        return Err(PathError::Nul(p.to_string()));
    }
    if p.starts_with('/') {
        return Err(PathError::Absolute(p.to_string()));
    }
    if p.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong(p.to_string()));
    }
    for c in p.split('/') {
        match c {
            ".." => return Err(PathError::DotDot(p.to_string())),
            "" | "." => return Err(PathError::NotNormal(p.to_string())),
            c if c.len() > MAX_COMPONENT_LEN => return Err(PathError::TooLong(p.to_string())),
            _ => {}
        }
    }
    Ok(())
}

/// Normalizes a path typed in a ref: trailing slashes are dropped, an empty
/// path means the whole version (`None`); the rest must be [`validate`]d.
pub fn normalize_ref_path(p: &str) -> Result<Option<String>, PathError> {
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(None);
    }
    validate(trimmed)?;
    Ok(Some(trimmed.to_string()))
}

/// The canonical order of entries: paths compared component by component,
/// each component by its UTF-8 bytes. A directory sorts directly before
/// its descendants, which are contiguous.
pub fn canonical_cmp(a: &str, b: &str) -> Ordering {
    a.split('/').cmp(b.split('/'))
}

/// The parent directory of `p`, `None` for a top-level entry.
pub fn parent(p: &str) -> Option<&str> {
    p.rsplit_once('/').map(|(d, _)| d)
}

/// True when `under` is `dir` or lies below it, on component boundaries
/// (`config` covers `config/a` but not `configuration.json`).
pub fn is_within(under: &str, dir: &str) -> bool {
    under == dir
        || (under.len() > dir.len()
            && under.starts_with(dir)
            && under.as_bytes()[dir.len()] == b'/')
}

/// Checks a symlink target: relative, no NUL, and, resolved lexically from
/// the link's directory, never above the volume root at any step.
pub fn symlink_target_stays_inside(link: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\0') {
        return false;
    }
    let mut depth: usize = parent(link).map_or(0, |d| d.split('/').count());
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            _ => depth += 1,
        }
    }
    true
}

/// Whether a target goes up (`..`) after going down a component: only then
/// can it pass through one of the tree's symlinks and climb out of where
/// that link led (SPEC.md §2.3 rule 5), so only such targets need the tree.
pub fn climbs_after_descending(target: &str) -> bool {
    let mut descended = false;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if descended => return true,
            ".." => {}
            _ => descended = true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_puts_children_after_parent() {
        let mut v = vec!["a-b", "a/b", "a", "a/b/c", "b", "a.txt"];
        v.sort_by(|x, y| canonical_cmp(x, y));
        assert_eq!(v, ["a", "a/b", "a/b/c", "a-b", "a.txt", "b"]);
    }

    #[test]
    fn symlinks() {
        assert!(symlink_target_stays_inside("a/b/link", "../c"));
        assert!(symlink_target_stays_inside("a/link", "../c"));
        assert!(!symlink_target_stays_inside("link", "../c"));
        assert!(!symlink_target_stays_inside("a/link", "x/../../../c"));
        assert!(!symlink_target_stays_inside("a/link", "/etc/passwd"));
        assert!(symlink_target_stays_inside("link", "./x/./y"));
        assert!(climbs_after_descending("l/.."));
        assert!(climbs_after_descending("../a/../b"));
        assert!(!climbs_after_descending("../../a/b"));
        assert!(!climbs_after_descending("./a/./b"));
    }

    #[test]
    fn within() {
        assert!(is_within("config/a", "config"));
        assert!(is_within("config", "config"));
        assert!(!is_within("configuration.json", "config"));
    }
}
