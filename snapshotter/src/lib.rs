//! sealvol's read side: a sealed version mounted as a read-only FUSE file
//! system whose bytes stream in as they are read.
//!
//! Mounting fetches only the tree index; names, attributes, directory
//! listings and link targets are then answered from memory. A read fetches
//! just the chunks its range touches (from memory, the on-disk chunk cache
//! `pull` shares, or the registry), checks each one's sha256 and BLAKE3
//! before serving a byte of it, and fails with `EIO` rather than serve a
//! corrupt chunk or hang on a registry that is away. Reads run concurrently
//! on the async runtime; two reads of one chunk share one fetch; sequential
//! reads fetch ahead; [`Prefetch`] can fill the cache in the background.
//!
//! The modules follow a read's path: [`inodes`] (the tree index as an inode
//! table), `reader` (verified chunks, single flight, read-ahead), `prefetch`
//! (background fetches), `fs` (the `fuser::Filesystem` adapter) and
//! [`mount()`] (the public entry point and its [`Mount`] handle).
//!
//! It is not a writable file system (every write is `EROFS`), not a
//! registry client of its own (it reads through `sealvol-client`), and not
//! yet the containerd snapshotter, which will be built on this mount.
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

mod fs;
pub mod inodes;
mod mount;
mod prefetch;
mod reader;

pub use mount::{
    mount, mounts, unmount, Mount, MountEntry, MountOptions, MountStats, Prefetch, Unmounted,
};
pub use reader::ReadError;

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
    #[error("cannot unmount {}: {message}", path.display())]
    Unmount { path: PathBuf, message: String },
}
