//! Mounting a version: resolve the ref, fetch and check the tree index (the
//! only download before the mount is ready), apply the policy for format 1
//! trees ([`MountOptions::legacy`]), build the inode table, and start a
//! FUSE session on its own thread. The returned [`Mount`] unmounts when
//! asked or dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sealvol_client::cache::ChunkCache;
use sealvol_client::pull::FetchStats;
use sealvol_client::resolve::{check_legacy, display_ref, load_tree, resolve, Legacy, Resolved};
use sealvol_client::Remote;
use sealvol_spec::reference::VolumeRef;
use sealvol_spec::tree::TreeIndex;
use sealvol_spec::B3Digest;

use crate::filled::FilledFiles;
use crate::fs::VolumeFs;
use crate::inodes::{Inodes, Owner};
use crate::prefetch::Prefetcher;
use crate::reader::RegistrySource;
use crate::verify::FileReader;
use crate::MountError;

/// What to fetch before it is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prefetch {
    /// Only what reads touch, plus read-ahead while a file is read in order.
    #[default]
    None,
    /// Also a file's whole content, in the background, once it is opened.
    Open,
    /// Also the whole version, in the background from the start: files that
    /// are opened first, then the rest in canonical order.
    All,
    /// Also what the version's newest recorded prefetch list names
    /// (`sealvol record`, SPEC.md §5.8), in its order, from the start;
    /// nothing more when it has none or it is refused.
    Recorded,
}

/// Who serves a mount's reads (`sealvol mount --engine`, the
/// snapshotter's `engine`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// fanotify where the kernel and the user allow it, else FUSE.
    #[default]
    Auto,
    /// The kernel, from local files filled on demand through fanotify
    /// pre-content events (root, Linux 6.14 and later; see
    /// `crate::fanotify`).
    Fanotify,
    /// This process, through FUSE.
    Fuse,
}

/// How a version is mounted.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The chunk cache folder, shared with `pull` (`~/.cache/sealvol`).
    pub cache_dir: PathBuf,
    /// Bound of the on-disk chunk cache in bytes (least recently used
    /// chunks are removed past it); `None` for no bound.
    pub cache_size: Option<u64>,
    /// A cache already open, shared with other mounts of this process so
    /// that they keep one bound between them (the containerd
    /// snapshotter's); `cache_dir` and `cache_size` are then unused.
    pub shared_cache: Option<ChunkCache>,
    /// The downloads under way among the mounts sharing that cache, so
    /// that a chunk two of them need is fetched once.
    pub shared_downloads: Option<crate::Downloads>,
    pub prefetch: Prefetch,
    /// Bytes kept in memory for reads: chunks, and the verified pieces
    /// reads are served from (a quarter of it for a format 2 tree; see
    /// `verify::split_memory`).
    pub memory_bytes: u64,
    /// How long a read waits for one chunk before failing with `EIO`.
    pub fetch_timeout: Duration,
    /// Parallel fetches of a background prefetch.
    pub prefetch_jobs: usize,
    /// Let other users read the mount (FUSE's `allow_other`; a non-root
    /// user needs `user_allow_other` in `/etc/fuse.conf`).
    pub allow_other: bool,
    /// What to do with a format 1 tree index, whose bytes cannot be
    /// verified against the version digest: mount it, serving chunks
    /// checked by sha256 only ([`Legacy::Warn`]; [`Mount::verifiable`] is
    /// then false and the caller prints `legacy_warning`), or refuse
    /// ([`Legacy::Refuse`], `--require-verified`).
    pub legacy: Legacy,
    /// Refuse to mount a version none of these keys signed (SPEC.md
    /// §5.9); no check when empty.
    pub signed_by: Vec<sealvol_client::signature::TrustedKey>,
    /// Who every entry is presented as owned by, `(uid, gid)`, instead of
    /// the mounting user: a user-namespaced pod's root as the host sees it,
    /// so the pod's root owns the version without a copy or a chown (the
    /// snapshotter's `remap-ids`).
    pub owner: Option<(u32, u32)>,
    /// Who serves the reads ([`MountOptions::new`]: FUSE).
    pub engine: Engine,
}

impl MountOptions {
    /// The defaults, with the chunk cache in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> MountOptions {
        MountOptions {
            cache_dir: cache_dir.into(),
            cache_size: None,
            shared_cache: None,
            shared_downloads: None,
            prefetch: Prefetch::None,
            memory_bytes: 128 << 20,
            fetch_timeout: Duration::from_secs(30),
            prefetch_jobs: sealvol_client::push::DEFAULT_JOBS,
            allow_other: false,
            legacy: Legacy::Warn,
            signed_by: Vec::new(),
            owner: None,
            // Library users (the containerd snapshotter) opt in; `sealvol
            // mount` defaults to `Auto`.
            engine: Engine::Fuse,
        }
    }
}

/// Where a mount's reads were served from so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountStats {
    /// Chunks downloaded from the registry, and their bytes.
    pub chunks_downloaded: u64,
    pub bytes_downloaded: u64,
    /// Chunks read from the on-disk cache.
    pub chunks_from_disk: u64,
    /// Chunk requests served from memory.
    pub memory_hits: u64,
    /// Pieces checked against the version digest (format 2 trees).
    pub pieces_verified: u64,
    /// Piece requests served from verified memory.
    pub piece_hits: u64,
    /// Cached chunks found damaged after a piece failed, and fetched again.
    pub chunks_damaged: u64,
    /// Pieces that did not match the version digest (a forged tree index
    /// or damaged data in the registry): their reads got `EIO`.
    pub pieces_forged: u64,
    /// Chunk requests that joined a fetch already under way.
    pub joined_fetches: u64,
    /// Reads answered with `EIO`.
    pub read_errors: u64,
    /// Chunks a background prefetch fetched.
    pub prefetched: u64,
}

/// A mounted version. Dropping it unmounts (lazily if files are open).
pub struct Mount {
    mountpoint: PathBuf,
    reference: String,
    version: B3Digest,
    unmounter: Option<fuser::SessionUnmounter>,
    session: Option<std::thread::JoinHandle<()>>,
    ended: tokio::sync::watch::Receiver<bool>,
    fetch_stats: Arc<FetchStats>,
    loaded: Loaded,
    reader: Arc<FileReader>,
    prefetch: Option<Arc<Prefetcher>>,
    read_errors: Arc<std::sync::atomic::AtomicU64>,
    /// The engine serving it, and why, for `sealvol mount` to print.
    engine: (Engine, String),
    fanotify: Option<crate::fanotify::Session>,
}

/// How an unmount went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Gone, and the session has ended.
    Clean,
    /// Files were open: the mount was detached from the tree (new lookups
    /// fail), and reads of the open files fail once this process exits.
    Detached,
    /// Someone else unmounted it already.
    Already,
}

/// Mounts the version `vref` names (a directory of it when the ref has a
/// path) at `mountpoint`, an existing directory. Only the tree index is
/// fetched; file bytes come as they are read. Must run inside a
/// multi-threaded tokio runtime, which serves the reads for as long as the
/// mount lives.
pub async fn mount(
    remote: &Remote,
    vref: &VolumeRef,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<Mount, MountError> {
    check_mountpoint(mountpoint)?;
    let loaded = if opts.signed_by.is_empty() {
        Loaded::fetch(remote, vref).await?
    } else {
        Loaded::fetch_signed(remote, vref).await?
    };
    mount_loaded(remote, vref, &loaded, mountpoint, opts).await
}

/// A version resolved on its registry and its tree index fetched and
/// decoded: all a mount asks of the registry before it serves. Cheap to
/// clone; [`Mount::loaded`] gives a mount's, so that another mount of the
/// same version starts without asking the registry again (the snapshotter
/// mounts a version once more for each user namespace that reads it).
#[derive(Clone, Debug)]
pub struct Loaded {
    version: Arc<Resolved>,
    tree: Arc<TreeIndex>,
    /// The version's signatures, when fetched with it (not yet checked).
    signatures: Option<Arc<sealvol_client::signature::Prefetched>>,
}

impl Loaded {
    /// Resolves `vref` on `remote` and fetches its tree index.
    pub async fn fetch(remote: &Remote, vref: &VolumeRef) -> Result<Loaded, MountError> {
        remote.prepare(&vref.repository(), false).await;
        let version = resolve(remote, vref).await?;
        let tree = load_tree(remote, &version).await?;
        Ok(Loaded {
            version: Arc::new(version),
            tree: Arc::new(tree),
            signatures: None,
        })
    }

    /// [`Loaded::fetch`], with the version's signatures fetched while the
    /// tree is: a required signature then costs a mount no round trip of
    /// its own.
    pub async fn fetch_signed(remote: &Remote, vref: &VolumeRef) -> Result<Loaded, MountError> {
        remote.prepare(&vref.repository(), false).await;
        let version = resolve(remote, vref).await?;
        let (tree, signatures) = tokio::join!(
            load_tree(remote, &version),
            sealvol_client::signature::prefetch(remote, &version)
        );
        Ok(Loaded {
            tree: Arc::new(tree?),
            signatures: Some(Arc::new(signatures?)),
            version: Arc::new(version),
        })
    }

    /// Checks that one of `keys` signed this version (as a mount with
    /// [`MountOptions::signed_by`] does before it serves); asks the
    /// registry for the version's signature referrers.
    pub async fn require_signature(
        &self,
        remote: &Remote,
        keys: &[sealvol_client::signature::TrustedKey],
    ) -> Result<(), MountError> {
        sealvol_client::signature::require(remote, &self.version, &self.tree, keys).await?;
        Ok(())
    }
}

/// [`mount`] of `loaded`, which must be the version `vref` names (its
/// path, if any, picks the directory mounted).
pub async fn mount_loaded(
    remote: &Remote,
    vref: &VolumeRef,
    loaded: &Loaded,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<Mount, MountError> {
    let mountpoint = check_mountpoint(mountpoint)?;
    let rt = tokio::runtime::Handle::current();
    let repo = vref.repository();
    let (version, tree) = (&loaded.version, Arc::clone(&loaded.tree));
    legacy_policy(
        &tree,
        opts.legacy,
        &display_ref(remote, &vref.without_path()),
    )?;
    if !opts.signed_by.is_empty() {
        let keys = &opts.signed_by;
        match &loaded.signatures {
            Some(pre) => {
                sealvol_client::signature::require_from(remote, version, &tree, keys, pre).await?
            }
            None => sealvol_client::signature::require(remote, version, &tree, keys).await?,
        };
    }
    let reference = display_ref(remote, &version.pinned);
    let created = version
        .index
        .created
        .as_deref()
        .and_then(|c| humantime::parse_rfc3339_weak(c).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let owner = match opts.owner {
        Some((uid, gid)) => Owner {
            uid,
            gid,
            time: created,
        },
        None => Owner::current(created),
    };
    let inodes = Arc::new(Inodes::new(tree, vref.path.as_deref(), owner)?);

    let cache = if let Some(shared) = &opts.shared_cache {
        shared.clone()
    } else {
        let (dir, size) = (opts.cache_dir.clone(), opts.cache_size);
        tokio::task::spawn_blocking(move || match size {
            Some(max) => ChunkCache::open_bounded(&dir, max),
            None => ChunkCache::open(&dir),
        })
        .await
        .expect("cache task panicked")
        .map_err(|e| MountError::Cache {
            path: opts.cache_dir.clone(),
            message: e.to_string(),
        })?
    };
    let fetch_stats = Arc::new(FetchStats::default());
    let chunk_cache = cache.clone();
    let source = Arc::new(RegistrySource {
        remote: remote.clone(),
        repo,
        cache,
        stats: Arc::clone(&fetch_stats),
        timeout: opts.fetch_timeout,
        in_flight: opts.shared_downloads.clone(),
    });
    let reader = FileReader::new(Arc::clone(&inodes), source, opts.memory_bytes, rt.clone());
    let prefetch = match opts.prefetch {
        Prefetch::None => None,
        Prefetch::Open | Prefetch::All => Some(Prefetcher::new(
            Arc::clone(reader.chunks()),
            Arc::clone(&inodes),
            opts.prefetch == Prefetch::All,
            opts.prefetch_jobs,
            rt.clone(),
        )),
        Prefetch::Recorded => Some(crate::record::start(
            remote.clone(),
            Arc::clone(&loaded.version),
            Arc::clone(&loaded.tree),
            Arc::clone(&inodes),
            Arc::clone(reader.chunks()),
            opts.prefetch_jobs,
            rt.clone(),
        )),
    };
    let engine = choose_engine(opts);
    // A root FUSE mount keeps what it reads in the layout the fanotify
    // engine fills, once, instead of chunks and then a whole-file copy
    // (`crate::filled`); only where the version fits the cache's bound,
    // since a mounted file's filled pieces are not given back (the kernel
    // may serve them from it directly), while chunks are, least recently
    // used first.
    let fits = opts.cache_size.is_none_or(|bound| {
        inodes
            .files()
            .filter_map(|i| inodes.file(i))
            .map(|f| f.size)
            .sum::<u64>()
            <= bound
    });
    let filled = match (engine.0, inodes.verifiable() && fits) {
        (Engine::Fuse, true) => {
            let folder = crate::fanotify::layout::folder(
                &opts.cache_dir,
                &version.index.digest,
                vref.path.as_deref(),
                opts.owner,
            );
            let (inodes, reader, reference) =
                (Arc::clone(&inodes), Arc::clone(&reader), reference.clone());
            let (cache_dir, cache_size, chunks) =
                (opts.cache_dir.clone(), opts.cache_size, chunk_cache.clone());
            tokio::task::spawn_blocking(move || {
                let filled = FilledFiles::for_root(&folder, &inodes, owner, &reference)?;
                crate::fanotify::trim(&cache_dir, cache_size, &chunks);
                reader.chunks().keep_reads_in_memory();
                crate::fanotify::reuse_other_layouts(&cache_dir, &folder, &reader);
                Some(filled)
            })
            .await
            .ok()
            .flatten()
        }
        _ => None,
    };
    if let (Some(p), Some(f)) = (&prefetch, &filled) {
        p.fill_into(f.prefetch_sink(&inodes, Arc::clone(&reader)));
    }
    if engine.0 == Engine::Fanotify {
        // Fills land in the layout's files, which later mounts read: a
        // copy in the chunk cache too would write each byte twice.
        reader.chunks().keep_reads_in_memory();
        let m = crate::fanotify::mount(crate::fanotify::Request {
            cache_dir: opts.cache_dir.clone(),
            cache_size: opts.cache_size,
            chunk_cache,
            version: version.index.digest,
            base: vref.path.clone(),
            remapped: opts.owner,
            inodes: Arc::clone(&inodes),
            owner,
            reference: reference.clone(),
            reader: Arc::clone(&reader),
            prefetch: prefetch.clone(),
            mountpoint: mountpoint.clone(),
            rt: rt.clone(),
        })
        .await?;
        let (session, read_errors) = m;
        // The engine has set its sink (the layout) by now.
        if let Some(p) = &prefetch {
            p.begin();
        }
        return Ok(Mount {
            mountpoint,
            reference,
            version: version.index.digest,
            loaded: loaded.clone(),
            unmounter: None,
            session: None,
            ended: session.ended(),
            fetch_stats,
            reader,
            prefetch,
            read_errors,
            engine,
            fanotify: Some(session),
        });
    }
    let fs = VolumeFs::new(
        Arc::clone(&inodes),
        Arc::clone(&reader),
        prefetch.clone(),
        filled,
        rt.clone(),
    );
    let read_errors = Arc::clone(&fs.read_errors);

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("sealvol:{reference}")),
        fuser::MountOption::Subtype("sealvol".into()),
        fuser::MountOption::RO,
        fuser::MountOption::NoAtime,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        // The kernel checks permissions against the modes of the version.
        fuser::MountOption::DefaultPermissions,
    ];
    if opts.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    // Mounting waits for the kernel's INIT: off the async threads.
    let mut session = {
        let at = mountpoint.clone();
        tokio::task::spawn_blocking(move || fuser::Session::new(fs, &at, &config))
            .await
            .expect("mount task panicked")
            .map_err(|e| MountError::Fuse {
                path: mountpoint.clone(),
                message: e.to_string(),
            })?
    };
    let unmounter = session.unmount_callable();
    let (ended_tx, ended) = tokio::sync::watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("sealvol-fuse".into())
        .spawn({
            let shown = mountpoint.display().to_string();
            move || {
                if let Err(e) = session.run() {
                    tracing::warn!(mountpoint = shown, error = %e, "FUSE session ended");
                }
                let _ = ended_tx.send(true);
            }
        })
        .map_err(|e| MountError::Fuse {
            path: mountpoint.clone(),
            message: format!("cannot start the session thread: {e}"),
        })?;
    raise_readahead(&mountpoint);
    if let Some(p) = &prefetch {
        p.begin();
    }
    Ok(Mount {
        mountpoint,
        reference,
        version: version.index.digest,
        loaded: loaded.clone(),
        unmounter: Some(unmounter),
        session: Some(thread),
        ended,
        fetch_stats,
        reader,
        prefetch,
        read_errors,
        engine,
        fanotify: None,
    })
}

/// The engine for a mount, and a few words on why (`opts.engine` Auto:
/// fanotify when the kernel and the user allow it, else FUSE).
fn choose_engine(opts: &MountOptions) -> (Engine, String) {
    match opts.engine {
        Engine::Fuse => (Engine::Fuse, "asked for".into()),
        Engine::Fanotify => (Engine::Fanotify, "kernel pre-content events".into()),
        Engine::Auto => match crate::fanotify::probe(&opts.cache_dir) {
            Ok(()) => (Engine::Fanotify, "kernel pre-content events".into()),
            Err(e) => (Engine::Fuse, e.to_string()),
        },
    }
}

/// Whether `tree` may be mounted under `policy`: `Ok(true)` when every byte
/// it serves is verified against the version digest, `Ok(false)` for a
/// format 1 tree mounted with a warning, the `check_legacy` error when a
/// format 1 tree is refused. `shown` is the ref as the user gave it.
fn legacy_policy(tree: &TreeIndex, policy: Legacy, shown: &str) -> Result<bool, MountError> {
    let verifiable = check_legacy(tree, policy, shown)?;
    if !verifiable {
        tracing::debug!(
            version = shown,
            "format 1 tree index: chunks are checked by sha256 only"
        );
    }
    Ok(verifiable)
}

/// The mountpoint as an absolute path, if it is a directory.
fn check_mountpoint(path: &Path) -> Result<PathBuf, MountError> {
    let err = |message: String| MountError::Mountpoint {
        path: path.to_path_buf(),
        message,
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(err("not a directory".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(err("no such directory; create it first".into()))
        }
        Err(e) => return Err(err(e.to_string())),
    }
    let canonical = path.canonicalize().map_err(|e| err(e.to_string()))?;
    // Mounting over a mount would hide it, and unmounting by path later
    // would take down whichever is on top: refuse.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if mount_points(&mountinfo).any(|m| m == canonical) {
        return Err(err(
            "already a mount point; unmount it first (sealvol umount) or choose another directory"
                .into(),
        ));
    }
    Ok(canonical)
}

/// Every mount point in a mountinfo text, whatever is mounted there.
fn mount_points(mountinfo: &str) -> impl Iterator<Item = PathBuf> + '_ {
    mountinfo
        .lines()
        .filter_map(|line| Some(PathBuf::from(unescape(line.split(' ').nth(4)?))))
}

/// The kernel reads ahead only 128 KiB on a FUSE mount by default, which
/// makes a sequential read many small requests. Chunks are megabytes, so
/// ask for 4 MiB per file (the bdi setting; only root may change it).
fn raise_readahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let path = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    if let Err(e) = std::fs::write(&path, "4096") {
        tracing::debug!(path, error = %e, "read-ahead left at the kernel's default");
    }
}

impl Mount {
    /// The absolute path the version is mounted at.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The mounted ref, pinned to its digest: `bdn:ns/vol@b3:<hex>[/path]`.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// The version digest.
    pub fn version(&self) -> B3Digest {
        self.version
    }

    /// The version and tree index it serves, for another mount of it
    /// ([`mount_loaded`]).
    pub fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    /// Whether every byte the mount serves is verified against the version
    /// digest (SPEC.md §2.5). False for a format 1 tree index, mounted under
    /// [`Legacy::Warn`]: its chunks are checked by sha256 only, and the
    /// caller should say so (`sealvol_client::resolve::legacy_warning`).
    pub fn verifiable(&self) -> bool {
        self.reader.verifiable()
    }

    /// The engine serving the mount and why it was chosen:
    /// `fanotify (kernel pre-content events)`, `fuse (…)`.
    pub fn engine(&self) -> (Engine, &str) {
        (self.engine.0, &self.engine.1)
    }

    pub fn stats(&self) -> MountStats {
        let r = &self.reader.chunks().stats;
        let p = &self.reader.stats;
        MountStats {
            chunks_downloaded: self.fetch_stats.downloaded.load(Ordering::Relaxed),
            bytes_downloaded: self.fetch_stats.bytes.load(Ordering::Relaxed),
            chunks_from_disk: self.fetch_stats.cached.load(Ordering::Relaxed),
            memory_hits: r.memory_hits.load(Ordering::Relaxed),
            pieces_verified: p.verified.load(Ordering::Relaxed),
            piece_hits: p.hits.load(Ordering::Relaxed),
            chunks_damaged: r.damaged.load(Ordering::Relaxed),
            pieces_forged: p.forged.load(Ordering::Relaxed),
            joined_fetches: r.joined.load(Ordering::Relaxed),
            read_errors: self.read_errors.load(Ordering::Relaxed),
            prefetched: self
                .prefetch
                .as_ref()
                .map_or(0, |p| p.fetched.load(Ordering::Relaxed)),
        }
    }

    /// Resolves when the mount has gone away without [`Mount::unmount`]
    /// (`sealvol umount`, `fusermount3 -u`, `umount`).
    pub fn ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.ended.clone();
        async move {
            let _ = rx.wait_for(|ended| *ended).await;
        }
    }

    /// Unmounts. When files are still open the mount is detached instead
    /// ([`Unmounted::Detached`]).
    pub fn unmount(mut self) -> Result<Unmounted, MountError> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<Unmounted, MountError> {
        if let Some(p) = &self.prefetch {
            p.stop();
        }
        if let Some(session) = &mut self.fanotify {
            return session.unmount().map_err(|e| MountError::Unmount {
                path: self.mountpoint.clone(),
                message: e.to_string(),
            });
        }
        let Some(mut unmounter) = self.unmounter.take() else {
            return Ok(Unmounted::Already);
        };
        if *self.ended.borrow() {
            self.join();
            return Ok(Unmounted::Already);
        }
        match unmounter.unmount() {
            Ok(()) => {
                self.join();
                Ok(Unmounted::Clean)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                detach(&self.mountpoint).map_err(|e| MountError::Unmount {
                    path: self.mountpoint.clone(),
                    message: e.to_string(),
                })?;
                // The session lives on until the open files are closed or
                // this process exits; do not wait for it.
                self.session.take();
                Ok(Unmounted::Detached)
            }
            Err(e) => Err(MountError::Unmount {
                path: self.mountpoint.clone(),
                message: e.to_string(),
            }),
        }
    }

    /// Waits (a little) for the session thread to see the unmount.
    fn join(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !*self.ended.borrow() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if *self.ended.borrow() {
            if let Some(t) = self.session.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::warn!(error = %e, "unmount failed");
        }
    }
}

/// Lazily unmounts `path` (`umount -l`).
fn detach(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A sealvol mount on this machine, from `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    /// What the mount shows as its source: `sealvol:<ref>`.
    pub source: String,
}

/// The sealvol mounts this process can see.
pub fn mounts() -> std::io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let (fstype, source) = (right.next()?, right.next()?);
            let source = unescape(source);
            if fstype.starts_with("fuse") && source.starts_with("sealvol:") {
                return Some(MountEntry {
                    mountpoint: PathBuf::from(unescape(mountpoint)),
                    source,
                });
            }
            // The fanotify engine's bind mount of a laid-out version.
            let root = unescape(left.split(' ').nth(3)?);
            let shown = crate::fanotify::layout::mounted_ref(&root)?;
            Some(MountEntry {
                mountpoint: PathBuf::from(unescape(mountpoint)),
                source: format!("sealvol:{shown}"),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts the sealvol mount at `path` (`sealvol umount`); with `lazy`,
/// detaches it even while files are open. The process serving it then
/// exits.
pub fn unmount(path: &Path, lazy: bool) -> Result<(), MountError> {
    let err = |message: String| MountError::Unmount {
        path: path.to_path_buf(),
        message,
    };
    // A mount whose process died cannot be resolved (ENOTCONN): fall back
    // to the path as given.
    let abs = path
        .canonicalize()
        .or_else(|_| std::path::absolute(path))
        .map_err(|e| err(e.to_string()))?;
    let known = mounts().map_err(|e| err(format!("cannot list mounts: {e}")))?;
    if !known.iter().any(|m| m.mountpoint == abs) {
        return Err(err("not a sealvol mount".into()));
    }
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(abs.as_os_str().as_bytes()).map_err(|e| err(e.to_string()))?;
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EBUSY) => Err(err(
            "busy: a file is open or a process works in it; close them, or pass --lazy".into(),
        )),
        // Not root: the setuid helper unmounts what this user mounted.
        Some(libc::EPERM) => {
            let mut cmd = std::process::Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd
                .arg("--")
                .arg(&abs)
                .output()
                .map_err(|e| err(format!("cannot run fusermount3 ({e}); install fuse3")))?;
            if out.status.success() {
                Ok(())
            } else {
                let msg = String::from_utf8_lossy(&out.stderr);
                Err(err(msg
                    .lines()
                    .next()
                    .unwrap_or("fusermount3 failed")
                    .trim()
                    .to_string()))
            }
        }
        _ => Err(err(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealvol_spec::tree::EntryData;
    use sealvol_spec::ChunkingParams;

    #[test]
    fn a_format_1_tree_is_refused_or_mounted_unverified() {
        let entries = vec![crate::testing::file("f", EntryData::file_of(b"hello", &[]))];
        let v1 = crate::testing::v1_tree(&entries);
        let e = legacy_policy(&v1, Legacy::Refuse, "bdn:ns/vol").unwrap_err();
        assert!(
            matches!(e, MountError::Client(sealvol_client::Error::Unverified(_))),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("bdn:ns/vol has a format 1 tree index"),
            "{e}"
        );
        assert!(!legacy_policy(&v1, Legacy::Warn, "bdn:ns/vol").unwrap());
        let v2 = TreeIndex::new(ChunkingParams::default(), entries).unwrap();
        assert!(legacy_policy(&v2, Legacy::Refuse, "bdn:ns/vol").unwrap());
        assert_eq!(MountOptions::new("/tmp").legacy, Legacy::Warn);
    }

    #[test]
    fn mount_points_are_every_mount_unescaped() {
        let text = "22 1 0:21 / /proc rw - proc proc rw\n98 22 0:50 / /mnt/my\\040vol ro - fuse.sshfs x rw\n";
        let points: Vec<PathBuf> = mount_points(text).collect();
        assert_eq!(
            points,
            vec![PathBuf::from("/proc"), PathBuf::from("/mnt/my vol")]
        );
    }

    #[test]
    fn mountinfo_lists_sealvol_mounts_only() {
        let text = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
98 22 0:50 / /mnt/my\\040vol ro,nosuid,nodev,noatime - fuse sealvol:bdn:ns/vol@b3:ab rw,user_id=0
99 22 0:51 / /mnt/b ro - fuse.sealvol sealvol:127.0.0.1:5000/ns/v@b3:cd rw
100 22 0:52 / /mnt/other ro - fuse.sshfs host:/x rw
101 22 254:0 /nonexistent/fanotify/abababababababababababababababababababababababababababababababab/tree /mnt/f ro - ext4 /dev/vda rw
102 22 254:0 /srv/fanotify/short/tree /mnt/g ro - ext4 /dev/vda rw
";
        assert_eq!(
            parse_mountinfo(text),
            vec![
                MountEntry {
                    mountpoint: "/mnt/my vol".into(),
                    source: "sealvol:bdn:ns/vol@b3:ab".into()
                },
                MountEntry {
                    mountpoint: "/mnt/b".into(),
                    source: "sealvol:127.0.0.1:5000/ns/v@b3:cd".into()
                },
                MountEntry {
                    mountpoint: "/mnt/f".into(),
                    source:
                        "sealvol:abababababababababababababababababababababababababababababababab"
                            .into()
                },
            ]
        );
    }
}
