//! Why a run could not start, as opposed to a check that failed
//! ([`crate::failure`]): a bad URL or namespace, or a registry that cannot
//! be reached at all. Both [`crate::run`] and [`crate::http`] return it, so
//! it lives below them.

/// Why a run could not start (usage errors and an unreachable registry).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid registry URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error(
        "invalid namespace {0:?}: it must be a repository name matching \
         [a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*, under 250 characters"
    )]
    InvalidNamespace(String),
    #[error("registry at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}
