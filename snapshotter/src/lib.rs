//! sealvol's read side: a sealed version mounted read-only, its bytes
//! streaming in as they are read, served by one of two engines: FUSE (this
//! process answers every read) or fanotify (the kernel serves local files
//! that this process fills on pre-content events; [`fanotify`]).
//!
//! Mounting fetches only the tree index (checked against the version
//! digest); names, attributes, directory listings and link targets are then
//! answered from memory. A read fetches just the chunks its range touches
//! (from memory, the on-disk chunk cache `pull` shares, or the registry),
//! and serves only bytes verified through the chain of SPEC.md §2.5, the
//! only hash of them it computes: the 1 MiB pieces the range
//! touches are assembled from those chunks and checked against the
//! chaining values the version digest covers, so a tree index whose chunk
//! lists were rewritten gives `EIO` on the pieces it falsifies instead of
//! another file's bytes. A read fails with `EIO` rather than serve wrong
//! bytes or hang on a registry that is away. Reads run concurrently on the
//! async runtime; two reads of one chunk or piece share one fetch or one
//! hash; sequential reads fetch and verify ahead; [`Prefetch`] can fill the
//! cache in the background.
//!
//! A format 1 tree index has no chaining values: it is refused with
//! [`MountOptions::legacy`] set to `Refuse`, and otherwise mounted with its
//! chunks checked by sha256 only, which ties them to the chunk list but not
//! to the version digest ([`Mount::verifiable`] is false; say so to the
//! user).
//!
//! The modules follow a read's path: [`inodes`] (the tree index as an inode
//! table), `verify` (verified pieces, the bytes reads are served from),
//! `reader` (chunks: single flight, memory, read-ahead), `prefetch`
//! (background fetches), `fs` (the `fuser::Filesystem` adapter), `filled`
//! (a root FUSE mount's one local copy, handed to the kernel by
//! passthrough), [`fanotify`] (the other engine) and [`mount()`] (the
//! public entry point and its [`Mount`] handle).
//!
//! It is not a writable file system (every write is `EROFS`) nor a
//! registry client of its own (it reads through `sealvol-client`).
//! [`containerd`] is the containerd snapshotter: ordinary layers as
//! containerd's overlayfs snapshotter serves them, and sealed versions
//! mounted lazily with either engine.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use sealvol_snapshotter::{mount, MountOptions};
//! let vref: sealvol_spec::reference::VolumeRef = "bdn:weights/llama@b3:9f3c2a1b0d4e".parse()?;
//! let remote = sealvol_client::Remote::connect("127.0.0.1:5000", false)?;
//! let m = mount(&remote, &vref, "/mnt/llama".as_ref(), &MountOptions::new("/var/cache/sealvol")).await?;
//! println!("{} at {}", m.reference(), m.mountpoint().display());
//! m.ended().await; // until someone runs `sealvol umount /mnt/llama`
//! # Ok(()) }
//! ```

use std::path::PathBuf;

pub mod containerd;
pub mod fanotify;
mod filled;
mod fs;
pub mod inodes;
mod mount;
mod prefetch;
mod reader;
pub mod record;
#[cfg(test)]
mod testing;
mod verify;

pub use mount::{
    mount, mount_loaded, mounts, unmount, Engine, Loaded, Mount, MountEntry, MountOptions,
    MountStats, Prefetch, Unmounted,
};
pub use reader::{Downloads, ReadError};

/// Why a mount or an unmount failed: one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error(transparent)]
    Client(#[from] sealvol_client::Error),
    #[error(transparent)]
    Inodes(#[from] inodes::InodeError),
    #[error("mountpoint {}: {message}", path.display())]
    Mountpoint { path: PathBuf, message: String },
    #[error("chunk cache {}: {message}", path.display())]
    Cache { path: PathBuf, message: String },
    #[error("cannot mount at {}: {message}; FUSE needs /dev/fuse and, for users other than root, fusermount3 (Debian: apt-get install fuse3)", path.display())]
    Fuse { path: PathBuf, message: String },
    #[error(transparent)]
    Fanotify(#[from] fanotify::EngineError),
    #[error("cannot unmount {}: {message}", path.display())]
    Unmount { path: PathBuf, message: String },
}
