//! The containerd snapshotter: a proxy plugin serving containerd's
//! snapshots gRPC service (`containerd.services.snapshots.v1`) on a unix
//! socket, configured in containerd as
//! `[proxy_plugins.sealvol] type = "snapshot", address = SOCKET`.
//!
//! This first step serves ordinary layers as containerd's overlayfs
//! snapshotter does ([`store`]: Prepare/Commit of upper dirs, views,
//! overlay mounts of committed chains, usage, removal and cleanup), since
//! a CRI node on containerd 1.6 has one snapshotter and must still run
//! every ordinary image. Recognizing a sealed version and mounting it
//! lazily in place of its view layer builds on this.
//!
//! The wire types are generated from containerd's own `.proto` files
//! (`proto/`, compiled by protox in `build.rs`); [`service`] maps each
//! call to the store and the store's errors to the gRPC codes containerd
//! reads as its error classes.

pub mod service;
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
        }
    }
}

use std::path::Path;

pub use service::SnapshotService;
pub use store::SnapshotStore;

/// `snapshotter.toml`; each field may be overridden on the command line.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where snapshots and their metadata live.
    pub root: std::path::PathBuf,
    /// The unix socket containerd's `proxy_plugins` entry names.
    pub address: std::path::PathBuf,
    /// The chunk cache every mounted version shares; default `ROOT/cache`.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Bound of that cache in bytes; none by default.
    pub cache_size: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: "/var/lib/sealvol/snapshotter".into(),
            address: "/run/sealvol/snapshotter.sock".into(),
            cache_dir: None,
            cache_size: None,
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
    #[error("gRPC server: {0}")]
    Serve(String),
}

/// Serves the snapshots service for the store under `config.root` on the
/// unix socket `config.address` until `stop` resolves; `ready` hears when
/// it listens. Versions mounted by a previous run are mounted again first.
pub async fn serve(
    config: &Config,
    ready: impl FnOnce(),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (root, address) = (config.root.as_path(), config.address.as_path());
    let store = SnapshotStore::open(root).map_err(|e| DaemonError::Store {
        path: root.display().to_string(),
        message: e.to_string(),
    })?;
    let mut options = crate::MountOptions::new(
        config
            .cache_dir
            .clone()
            .unwrap_or_else(|| root.join("cache")),
    );
    options.cache_size = config.cache_size;
    // Containers run as any user; the snapshot is theirs to read.
    options.allow_other = true;
    let service = SnapshotService::new(store, options);
    service.remount().await;
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
