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

pub mod api;
pub mod buffers;
pub mod cache;
pub mod cache_dir;
pub mod chunker;
pub mod claim;
pub mod credentials;

mod dest;
mod error;
pub mod filestate;
pub mod hosts;
pub mod inspect;
pub mod keys;
pub mod prefetch;
pub mod pull;
pub mod push;
mod referrer;
pub mod remote;
pub mod resolve;
pub mod seal;
pub mod signature;
pub mod sync;
pub mod upgrade;
pub mod verified;
pub mod verify;
pub mod volumes;
pub mod walk;

pub use cache_dir::CacheDir;
pub use chunker::ReadMode;
pub use error::{Error, SealError, TransportError};
pub use remote::{BlobCheck, Remote};
pub use seal::{seal, seal_with_progress, ChunkLocation, SealOptions, Sealed};

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
