//! Server-side sync (SPEC.md §8): reads a source — a Hugging Face
//! repository, an S3/R2/CoreWeave/GCS/Azure prefix, a folder on the host,
//! a version on another registry — and seals it as a stream into a chunk
//! store, one object at a time, with no staging copy on disk.
//!
//! [`open`] turns a URI into a [`Source`]: a listing of
//! [`Object`]s, each with the size and checksum the source vouches for, and
//! a byte stream per object read at the version the listing saw.
//! [`sealer::seal_object`] cuts that stream into the chunks of SPEC.md §4,
//! stores the ones the [`ChunkSink`] lacks and checks the object's size and
//! checksum. It is not a job scheduler or a registry: the registry persists
//! jobs, runs them on its workers and seals the version.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sealvol_sync::SyncError> {
//! use std::sync::atomic::AtomicBool;
//! use std::sync::Arc;
//!
//! use sealvol_spec::{ChunkingParams, Sha256Digest};
//! use sealvol_sync::{ChunkSink, SourceOptions, SyncError};
//!
//! /// Keeps nothing: enough to see how a file chunks.
//! struct Discard;
//!
//! #[async_trait::async_trait]
//! impl ChunkSink for Discard {
//!     async fn has(&self, _: &Sha256Digest) -> Result<bool, SyncError> {
//!         Ok(false)
//!     }
//!     async fn put(&self, _: &Sha256Digest, _: bytes::Bytes) -> Result<(), SyncError> {
//!         Ok(())
//!     }
//! }
//!
//! let source = sealvol_sync::open("dir:///srv/models/tiny", &SourceOptions::default())?;
//! let objects = source.list().await?;
//! let first = &objects[0];
//! let sealed = sealvol_sync::seal_object(
//!     first,
//!     source.open(first).await?,
//!     ChunkingParams::default().cutter().expect("the default parameters are valid"),
//!     Arc::new(Discard),
//!     &|_bytes_read| {},
//!     &AtomicBool::new(false),
//! )
//! .await?;
//! println!("{}: {} chunks, {}", first.path, sealed.chunks.len(), sealed.blake3);
//! # Ok(())
//! # }
//! ```

use std::fmt;

use bytes::Bytes;
use futures_util::stream::BoxStream;

pub mod aws_identity;
pub mod dir;
pub mod gcp_identity;
pub mod gcs;
pub mod hf;
mod http;
pub mod net;
pub mod oci;
pub mod schemes;
pub mod scope;
pub mod sealer;
pub mod source;
pub mod store;

pub use net::NetPolicy;
pub use schemes::open;
pub use scope::Scope;
pub use sealer::{seal_object, ChunkSink, SealedObject};
pub use source::{Source, SourceOptions};

/// Why a sync failed; [`ErrorKind::code`] is the job's error code (SPEC.md §8.2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SyncError {
    pub kind: ErrorKind,
    /// One line naming the source URI (or object) and what to do.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidSource,
    SecretUnknown,
    NotFound,
    Denied,
    Empty,
    Changed,
    Checksum,
    /// Worth retrying: a connection failure, timeout, 5xx or 429.
    Transient,
    Canceled,
    Internal,
}

impl ErrorKind {
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidSource => "INVALID_SOURCE",
            ErrorKind::SecretUnknown => "SECRET_UNKNOWN",
            ErrorKind::NotFound => "SOURCE_NOT_FOUND",
            ErrorKind::Denied => "SOURCE_DENIED",
            ErrorKind::Empty => "SOURCE_EMPTY",
            ErrorKind::Changed => "SOURCE_CHANGED",
            ErrorKind::Checksum => "CHECKSUM_MISMATCH",
            ErrorKind::Transient => "SOURCE_UNAVAILABLE",
            ErrorKind::Canceled => "CANCELED",
            ErrorKind::Internal => "INTERNAL",
        }
    }
}

impl SyncError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> SyncError {
        SyncError {
            kind,
            message: message.into(),
        }
    }

    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }

    /// The error an HTTP status from a source means: 404 not found, 401 and
    /// 403 denied, 408, 429 and 5xx transient, anything else invalid.
    pub fn from_status(status: u16, message: impl Into<String>) -> SyncError {
        let kind = match status {
            404 | 410 => ErrorKind::NotFound,
            401 | 403 => ErrorKind::Denied,
            408 | 429 | 500..=599 => ErrorKind::Transient,
            412 => ErrorKind::Changed,
            _ => ErrorKind::InvalidSource,
        };
        SyncError::new(kind, message)
    }
}

/// A checksum of a whole object that the source vouches for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    Sha256([u8; 32]),
    Md5([u8; 16]),
    /// The file's BLAKE3, as a sealvol tree index gives it (an `oci://`
    /// source): checked against the hash the sealer computes anyway, so
    /// it costs no pass of its own.
    Blake3([u8; 32]),
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checksum::Sha256(d) => write!(f, "sha256:{}", hex::encode(d)),
            Checksum::Md5(d) => write!(f, "md5:{}", hex::encode(d)),
            Checksum::Blake3(d) => write!(f, "b3:{}", hex::encode(d)),
        }
    }
}

/// One file of a source listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// Path in the version: relative, `/`-separated (SPEC.md §2.2).
    pub path: String,
    /// Where the source keeps it (key, path or URL), for messages and reads.
    pub key: String,
    pub size: u64,
    pub checksum: Option<Checksum>,
    /// What to do when the content does not match `checksum`, for a source
    /// whose checksums are not always what they seem (S3 ETags of
    /// encrypted objects): the end of the mismatch's message.
    pub mismatch_hint: Option<&'static str>,
    /// What pins this object's content (ETag, generation, commit, chunk
    /// list digest): a resumed job reuses a file done before only when its
    /// listing gives the same path, size and version.
    pub version: Option<String>,
    /// What names this object's content across listings and jobs (SPEC.md
    /// §8.5): a content hash (`sha256:` of a Hub LFS file and the BLAKE3
    /// of an `oci` file, which the read checks; a Hub git blob id), or a
    /// value the source changes
    /// whenever the content changes, with the key it belongs to (an ETag,
    /// a generation, a folder file's inode and times). A later job whose
    /// listing gives the same identity, within the same
    /// [`crate::Source::reuse_scope`], takes the file sealed before without
    /// reading a byte. `None` when the source vouches for nothing that
    /// strong: the file is always read.
    pub identity: Option<String>,
    /// Permission bits (SPEC.md §2.1).
    pub mode: u32,
}

/// The bytes of one object, in order.
pub type ByteStream = BoxStream<'static, Result<Bytes, SyncError>>;

/// Permission bits of files from sources that have none.
pub const FILE_MODE: u32 = 0o644;
/// Permission bits of the folders a version's paths imply.
pub const DIR_MODE: u32 = 0o755;
