//! The cache folder, decided once (by the command line) and passed down:
//! where sealvol keeps what it can compute or fetch again, or that it
//! keeps nothing on disk. Under the folder: `seal`'s file-state memo
//! (`filestate.redb`), the chunk cache (`chunks/`) and, per registry, the
//! repositories seen holding each chunk (`seen/`).

use std::path::{Path, PathBuf};

use crate::cache::{ChunkCache, SeenBlobs};
use crate::filestate::FileStateCache;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheDir {
    /// Nothing on disk: `seal` hashes every file, `push` asks the registry
    /// about every chunk, `pull` keeps chunks in memory only.
    Off,
    At(PathBuf),
}

impl Default for CacheDir {
    /// [`CacheDir::default_location`].
    fn default() -> Self {
        CacheDir::default_location()
    }
}

impl CacheDir {
    /// `$XDG_CACHE_HOME/sealvol`, else `~/.cache/sealvol`; off when neither
    /// variable is set.
    pub fn default_location() -> CacheDir {
        std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map_or(CacheDir::Off, |d| CacheDir::At(d.join("sealvol")))
    }

    /// As a command line says it: off with `--no-cache`, else `--cache-dir
    /// DIR`, else the default location.
    pub fn chosen(dir: Option<PathBuf>, off: bool) -> CacheDir {
        match (off, dir) {
            (true, _) => CacheDir::Off,
            (false, Some(d)) => CacheDir::At(d),
            (false, None) => CacheDir::default_location(),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            CacheDir::Off => None,
            CacheDir::At(d) => Some(d),
        }
    }

    /// `seal`'s file-state memo. One that cannot be opened is logged and
    /// left out: sealing only gets slower without it.
    pub fn file_states(&self) -> Option<FileStateCache> {
        match FileStateCache::open(self.path()?) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("sealing without the file-state cache: {e}");
                None
            }
        }
    }

    /// The chunk cache; an error when the folder cannot be used.
    pub fn chunks(&self) -> std::io::Result<Option<ChunkCache>> {
        self.path().map(ChunkCache::open).transpose()
    }

    /// The repositories of `registry` seen holding each chunk; left out
    /// (logged) when it cannot be opened: pushes then only ask more.
    pub fn seen(&self, registry: &str) -> Option<SeenBlobs> {
        match SeenBlobs::open(self.path()?, registry) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::debug!("pushing without the seen-chunks cache: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_decides_once() {
        let d = PathBuf::from("/tmp/x");
        assert_eq!(CacheDir::chosen(Some(d.clone()), true), CacheDir::Off);
        assert_eq!(CacheDir::chosen(Some(d.clone()), false), CacheDir::At(d));
        assert_eq!(CacheDir::chosen(None, false), CacheDir::default_location());
        assert_eq!(CacheDir::Off.chunks().unwrap().map(|_| ()), None);
        assert!(CacheDir::Off.file_states().is_none());
        assert!(CacheDir::Off.seen("reg.example").is_none());
    }
}
