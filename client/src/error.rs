//! What went wrong, each as one line a user can act on: [`Error`] for a
//! push, pull or inspection, [`SealError`] for sealing a directory, and
//! [`TransportError`] for one registry call. They live here, below every
//! module that returns them, so that no module has to import the one that
//! calls it to name its errors.

use std::path::{Path, PathBuf};

use crate::hosts::HostsError;

/// Why a push, pull or inspection failed: one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    NotAVersion(String),
    #[error("{0}; the registry holds damaged data or a proxy altered it")]
    Corrupt(String),
    /// A tree index whose own bytes break SPEC.md §2.3 (its sha256 matched:
    /// a publisher, or a mirror serving another tree, wrote it so).
    #[error("the version's tree index is invalid: {0}")]
    InvalidTree(String),
    #[error("{0}")]
    Usage(String),
    /// A recorded prefetch list (SPEC.md §5.8) that breaks a rule: it is
    /// not used, and nothing it names is fetched.
    #[error("the recorded prefetch list is refused: {0}")]
    InvalidPrefetch(String),
    /// A version whose bytes cannot be verified against its digest, refused
    /// by policy.
    #[error("{0}")]
    Unverified(String),
    /// A version no trusted key signed, refused by the caller's policy
    /// (SPEC.md §5.9).
    #[error("{0}")]
    Unsigned(String),
    /// A signing or trusted key that cannot be used.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The registry refused because of what someone else is doing, or the
    /// state the object is in (SPEC.md §7.2: 409).
    #[error("{0}")]
    Conflict(String),
    /// What was asked for existed once and is gone for good (SPEC.md §7.2:
    /// 410).
    #[error("{0}")]
    Gone(String),
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
}

impl Error {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

/// Why a registry call failed. Each message is one line that names the
/// registry or the object and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("registry {registry} is unreachable ({message}); check the address, or start it with `sealvol serve`")]
    Unreachable { registry: String, message: String },
    #[error("{0}")]
    NotFound(String),
    #[error(
        "registry {registry} denied access ({message}); log in with `sealvol login {registry}`"
    )]
    Denied { registry: String, message: String },
    #[error("registry {registry}: {message}")]
    Registry { registry: String, message: String },
    #[error(
        "{what} is corrupt: expected {expected}, got {actual}; the registry or a proxy altered it"
    )]
    Corrupt {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{0}")]
    Credentials(String),
    #[error("registry {registry} does not support {what}")]
    Unsupported { registry: String, what: String },
    /// The hosts directory (mirrors) could not be read.
    #[error("mirrors: {0}")]
    Hosts(#[from] HostsError),
}

/// Why sealing failed. Messages name the path and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("{}: name is not valid UTF-8; rename it or exclude it with --exclude", .0.display())]
    NotUtf8(PathBuf),
    #[error("{}: special files (sockets, FIFOs, devices) cannot be sealed; exclude it with --exclude", .0.display())]
    SpecialFile(PathBuf),
    #[error("{}: file changed while it was being sealed; seal again once it is stable", .0.display())]
    Changed(PathBuf),
    #[error(transparent)]
    Glob(#[from] sealvol_spec::filter::GlobError),
    #[error(transparent)]
    Chunking(#[from] sealvol_spec::chunking::ChunkingError),
    #[error(transparent)]
    Tree(#[from] sealvol_spec::tree::TreeError),
}

impl SealError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> SealError {
        SealError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

/// Why a signing or trusted key cannot be used (`sealvol_client::signature`):
/// the key's file or `env://` name, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct KeyError {
    pub(crate) source_name: String,
    pub(crate) message: String,
}
