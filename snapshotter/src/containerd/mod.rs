//! The containerd snapshotter: a proxy plugin serving containerd's
//! snapshots gRPC service (`containerd.services.snapshots.v1`) on a unix
//! socket, configured in containerd as
//! `[proxy_plugins.sealvol] type = "snapshot", address = SOCKET`.
//!
//! Ordinary layers are served as containerd's overlayfs snapshotter serves
//! them ([`store`]: Prepare/Commit of upper dirs, views, overlay mounts of
//! committed chains, usage, removal and cleanup), since a CRI node on
//! containerd 1.6 has one snapshotter and must still run every ordinary
//! image. A sealed version's view layer is mounted lazily in its place
//! instead, recognized on both of containerd 1.6's pull paths: by its
//! labels in a `Prepare` (CRI, `client.Pull` with unpack; [`version`]),
//! and by its unpacked pointer file in a `Commit` (`ctr images pull`,
//! which passes no labels; the repository then comes from containerd's
//! image record, [`images`]). containerd 2.x's pull paths (its transfer
//! service, with the proxy plugin's `enable_remote_snapshot_annotations`
//! export, and CRI's local pull) pass the same labels; an image volume is
//! then a snapshot prepared on the version's.
//!
//! Snapshots of user-namespaced pods come with id mapping labels, which a
//! proxy plugin declaring the `remap-ids` capability handles itself
//! ([`idmap`]): ordinary layers as containerd's overlayfs snapshotter does,
//! a version mounted once more owned by the pod's root.
//!
//! `[signatures]` ([`signatures`]) names the keys that must have signed
//! the versions of which repositories; the daemon sends them with each
//! mount to the fuse manager, which checks the version's signatures
//! before it serves, and a refusal fails the `Prepare` (or `Commit`) with
//! `FAILED_PRECONDITION`.
//!
//! The wire types are generated from containerd's own `.proto` files
//! (`proto/`, compiled by protox in `build.rs`); [`service`] maps each
//! call to the store and the store's errors to the gRPC codes containerd
//! reads as its error classes.

pub mod fuse_manager;
pub mod idmap;
pub mod images;
pub mod metrics;
pub mod service;
pub mod signatures;
pub mod store;
pub mod version;

/// containerd's API, generated; the module path mirrors the proto
/// packages, which the generated code refers to relatively.
#[allow(clippy::all, missing_docs)]
pub mod api {
    pub mod containerd {
        pub mod types {
            tonic::include_proto!("containerd.types");
        }
        pub mod services {
            pub mod snapshots {
                pub mod v1 {
                    tonic::include_proto!("containerd.services.snapshots.v1");
                }
            }
            pub mod images {
                pub mod v1 {
                    tonic::include_proto!("containerd.services.images.v1");
                }
            }
            pub mod content {
                pub mod v1 {
                    tonic::include_proto!("containerd.services.content.v1");
                }
            }
        }
    }
}

use std::path::{Path, PathBuf};

pub use service::SnapshotService;
pub use store::SnapshotStore;

/// `snapshotter.toml`; `root` and `address` may be overridden on the
/// command line.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where snapshots and their metadata live.
    pub root: PathBuf,
    /// The unix socket containerd's `proxy_plugins` entry names.
    pub address: PathBuf,
    /// containerd's socket, whose image records name the repository of a
    /// version pulled by `ctr images pull`.
    pub containerd_address: PathBuf,
    /// The chunk cache every mounted version shares; default `ROOT/cache`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of that cache in bytes; none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<u64>,
    /// What a mount fetches before it is read: `none` (only what is read,
    /// with read-ahead), `open` (a file whole once opened) or `all` (the
    /// whole version in the background).
    pub prefetch: PrefetchPolicy,
    /// Who serves a mounted version's reads: `auto` (fanotify where the
    /// kernel has pre-content events, Linux 6.14 and later, else FUSE),
    /// `fanotify` or `fuse`.
    pub engine: crate::Engine,
    /// How long a read waits for one chunk before it fails with `EIO`.
    pub fetch_timeout_seconds: u64,
    /// Registries (`host[:port]`) reached over plain HTTP; loopback ones
    /// always are.
    pub insecure_hosts: Vec<String>,
    /// containerd's hosts directory (`/etc/containerd/certs.d`): the
    /// mirrors of each registry, tried before it for reads (the CLI reads
    /// the same with `SEALVOL_HOSTS_DIR`); none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts_dir: Option<PathBuf>,
    /// Where `/metrics` is served (Prometheus text); off when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// `[signatures]`: the keys that must have signed the versions of
    /// which repositories ([`signatures`]); none by default.
    pub signatures: signatures::SignaturesConfig,
}

/// [`crate::Prefetch`] as the config spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefetchPolicy {
    #[default]
    None,
    Open,
    All,
    /// The version's recorded prefetch list (`sealvol record`, SPEC.md
    /// §5.8), in its order.
    Recorded,
}

impl PrefetchPolicy {
    /// `none`, `open`, `all` or `recorded`, as in the config.
    pub fn parse(s: &str) -> Option<PrefetchPolicy> {
        match s {
            "none" => Some(PrefetchPolicy::None),
            "open" => Some(PrefetchPolicy::Open),
            "all" => Some(PrefetchPolicy::All),
            "recorded" => Some(PrefetchPolicy::Recorded),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PrefetchPolicy::None => "none",
            PrefetchPolicy::Open => "open",
            PrefetchPolicy::All => "all",
            PrefetchPolicy::Recorded => "recorded",
        }
    }

    pub fn mode(self) -> crate::Prefetch {
        match self {
            PrefetchPolicy::None => crate::Prefetch::None,
            PrefetchPolicy::Open => crate::Prefetch::Open,
            PrefetchPolicy::All => crate::Prefetch::All,
            PrefetchPolicy::Recorded => crate::Prefetch::Recorded,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: "/var/lib/sealvol/snapshotter".into(),
            address: "/run/sealvol/snapshotter.sock".into(),
            containerd_address: "/run/containerd/containerd.sock".into(),
            cache_dir: None,
            cache_size: None,
            prefetch: PrefetchPolicy::None,
            engine: crate::Engine::Auto,
            fetch_timeout_seconds: 30,
            insecure_hosts: Vec::new(),
            hosts_dir: None,
            metrics_address: None,
            signatures: signatures::SignaturesConfig::default(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, DaemonError> {
        let err = |message: String| DaemonError::Config {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        toml::from_str(&text).map_err(|e| err(e.to_string()))
    }

    /// How the fuse manager mounts versions: one chunk cache for all,
    /// readable by containers running as any user.
    pub fn mount_options(&self) -> crate::MountOptions {
        let mut o = crate::MountOptions::new(
            self.cache_dir
                .clone()
                .unwrap_or_else(|| self.root.join("cache")),
        );
        o.cache_size = self.cache_size;
        o.prefetch = self.prefetch.mode();
        o.fetch_timeout = std::time::Duration::from_secs(self.fetch_timeout_seconds.max(1));
        o.allow_other = true;
        o.engine = self.engine;
        o
    }
}

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot read config {path}: {message}")]
    Config { path: String, message: String },
    #[error("cannot open the snapshot store in {path}: {message}")]
    Store { path: String, message: String },
    #[error("cannot listen on {path}: {message}")]
    Listen { path: String, message: String },
    #[error("fuse manager at {path}: {message}")]
    Manager { path: String, message: String },
    #[error("snapshotter.toml {0}")]
    Signatures(String),
    #[error("gRPC server: {0}")]
    Serve(String),
}

/// A gRPC channel over the unix socket `path` (containerd's, the
/// snapshotter's own, the fuse manager's).
pub async fn dial(path: &Path) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is a placeholder: the connector dials the socket.
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}

/// Serves the snapshots service for the store under `config.root` on the
/// unix socket `config.address` until `stop` resolves; `ready` hears when
/// it listens. Versions are mounted by the fuse manager, started with
/// `launcher` when none runs for this root; the versions the store records
/// are mounted again (or found mounted) first.
pub async fn serve(
    config: &Config,
    launcher: &fuse_manager::Launcher,
    ready: impl FnOnce(),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (root, address) = (config.root.as_path(), config.address.as_path());
    let store = SnapshotStore::open(root).map_err(|e| DaemonError::Store {
        path: root.display().to_string(),
        message: e.to_string(),
    })?;
    let keeper = fuse_manager::Keeper::attach(config, launcher).await?;
    let images = images::ImageRecords::new(&config.containerd_address);
    let service = SnapshotService::new(store, keeper, images);
    service.remount().await;
    if let Some(addr) = config.metrics_address {
        metrics::serve(addr, service.clone()).await?;
    }
    let listen = |e: std::io::Error| DaemonError::Listen {
        path: address.display().to_string(),
        message: e.to_string(),
    };
    if let Some(dir) = address.parent() {
        std::fs::create_dir_all(dir).map_err(listen)?;
    }
    // A socket left by a daemon that stopped without removing it.
    match std::fs::remove_file(address) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(listen(e)),
    }
    let listener = tokio::net::UnixListener::bind(address).map_err(listen)?;
    {
        use std::os::unix::fs::PermissionsExt;
        // containerd runs as root; nobody else talks to a snapshotter.
        std::fs::set_permissions(address, std::fs::Permissions::from_mode(0o600))
            .map_err(listen)?;
    }
    ready();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let result = tonic::transport::Server::builder()
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, stop)
        .await
        .map_err(|e| DaemonError::Serve(e.to_string()));
    let _ = std::fs::remove_file(address);
    result
}
