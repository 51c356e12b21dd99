//! The sealvol client library: turns directories into sealed versions and,
//! in later parts, moves them to and from OCI registries.
//!
//! Today it holds the sealing engine: [`seal()`] walks a directory
//! (include/exclude globs), content-defined-chunks every file with the
//! parameters of `sealvol-spec`, hashes each byte in one streaming pass on
//! all cores, and returns the tree index and version digest. A file-state
//! cache makes re-sealing an unchanged tree read no file data. It is not a
//! registry, a FUSE mount or a command-line parser.
//!
//! ```no_run
//! let sealed = sealvol_client::seal(std::path::Path::new("./model"), &Default::default()).unwrap();
//! println!("{} files, {}", sealed.stats.files, sealed.digest);
//! ```

use std::path::{Path, PathBuf};

pub mod api;
pub mod buffers;
pub mod cache;
pub mod cache_dir;
pub mod chunker;
pub mod claim;
pub mod credentials;

mod dest;
pub mod filestate;
pub mod hosts;
pub mod inspect;
pub mod keys;
pub mod pull;
pub mod push;
pub mod remote;
pub mod resolve;
pub mod seal;
pub mod sync;
pub mod upgrade;
pub mod verified;
pub mod verify;
pub mod volumes;
pub mod walk;

pub use cache_dir::CacheDir;
pub use chunker::ReadMode;
pub use remote::{Remote, TransportError};
pub use seal::{seal, seal_with_progress, ChunkLocation, SealOptions, Sealed};

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
    /// A version whose bytes cannot be verified against its digest, refused
    /// by policy.
    #[error("{0}")]
    Unverified(String),
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

/// Where a long operation is, for progress bars. Calls come from many
/// tasks at once; implementations count atomically.
pub trait Progress: Send + Sync {
    /// A new phase ("sealing", "uploading", "downloading") of `total` bytes.
    fn phase(&self, _name: &str, _total: u64) {}
    /// `bytes` more of the current phase are done.
    fn advance(&self, _bytes: u64) {}
    /// The operation ended (successfully or not).
    fn finish(&self) {}
}

/// Progress that nobody watches.
pub struct NoProgress;

impl Progress for NoProgress {}

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
