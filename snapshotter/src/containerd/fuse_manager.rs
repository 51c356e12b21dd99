//! The fuse manager: the long-lived process holding the FUSE sessions of
//! the versions the snapshotter mounts.
//!
//! With plain FUSE, the process holding `/dev/fuse` is the file system:
//! when it dies, every bind and overlay lower containerd has handed to a
//! container fails with `ENOTCONN`. So the gRPC daemon, which containerd
//! talks to and which may be restarted or upgraded at any time, mounts
//! nothing itself: it asks this process (started by the first daemon,
//! detached into its own session, and found again by every later one) over
//! a unix socket in the root. A restarted daemon re-attaches by asking for
//! the mounts its metadata records; the manager answers that it serves them
//! already. Reads in flight never notice the daemon's absence.
//!
//! The manager shares one chunk cache, and its bound, among every mount,
//! and fetches a chunk two mounts need at once only once. It exits (and
//! unmounts) only on SIGTERM or SIGINT; the daemon's unit must not kill it
//! with the daemon (`KillMode=process` under systemd).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sealvol_client::cache::ChunkCache;
use sealvol_client::signature::TrustedKey;
use sealvol_client::Remote;
use sealvol_spec::reference::VolumeRef;
use tokio::sync::Mutex;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::signatures::SignaturePolicy;
use super::{dial, Config, DaemonError, PrefetchPolicy};
use crate::{Mount, MountOptions, Unmounted};

/// The manager's API, generated from `proto/sealvol/fusemanager/v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("sealvol.fusemanager.v1");
}

/// The manager's socket, pid file, log and config, in the root.
pub const SOCKET: &str = "fuse-manager.sock";
pub const PID_FILE: &str = "fuse-manager.pid";
pub const LOG_FILE: &str = "fuse-manager.log";
pub const CONFIG_FILE: &str = "fuse-manager.toml";

/// How long a daemon waits for a manager it started to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The mounts served, by mountpoint.
struct Manager {
    mounts: Mutex<HashMap<PathBuf, Served>>,
    options: MountOptions,
    insecure_hosts: Vec<String>,
    hosts_dir: Option<std::path::PathBuf>,
}

struct Served {
    reference: String,
    owner: Option<(u32, u32)>,
    /// The registry client it reads chunks with.
    remote: Remote,
    mount: Mount,
}

/// A mount that failed, as the daemon passes it to containerd: a version
/// no trusted key signed as `FAILED_PRECONDITION` with the one line that
/// says so (it names the version and the keys), anything else as
/// `UNAVAILABLE`.
fn refused(reference: &str, e: crate::MountError) -> Status {
    match e {
        crate::MountError::Client(sealvol_client::Error::Unsigned(why)) => {
            Status::failed_precondition(why)
        }
        e => Status::unavailable(format!("cannot mount {reference}: {e}")),
    }
}

impl Manager {
    async fn mount(
        &self,
        reference: &str,
        at: &Path,
        prefetch: Option<PrefetchPolicy>,
        owner: Option<(u32, u32)>,
        signed_by: Vec<TrustedKey>,
    ) -> Result<bool, Status> {
        let mut mounts = self.mounts.lock().await;
        if let Some(s) = mounts.get(at) {
            if s.reference == reference && s.owner == owner {
                // Served already (a restarted daemon re-attaches): checked
                // again under the daemon's keys, which may be new.
                if !signed_by.is_empty() {
                    s.mount
                        .loaded()
                        .require_signature(&s.remote, &signed_by)
                        .await
                        .map_err(|e| refused(reference, e))?;
                }
                return Ok(true);
            }
            return Err(Status::already_exists(format!(
                "{} serves {} already",
                at.display(),
                s.reference
            )));
        }
        // A mount left by a manager that died: its reads fail with
        // ENOTCONN, and mounting over it would hide nothing.
        let _ = crate::unmount(at, true);
        let vref: VolumeRef = reference
            .parse()
            .map_err(|e| Status::invalid_argument(format!("{reference:?}: {e}")))?;
        let mut options = self.options.clone();
        if let Some(p) = prefetch {
            options.prefetch = p.mode();
        }
        options.owner = owner;
        options.signed_by = signed_by;
        let cannot = |e: crate::MountError| refused(reference, e);
        // The same version mounted already (for another user namespace):
        // its registry client and tree index, without asking the registry.
        let same = mounts.values().find(|s| s.reference == reference);
        let (remote, mount) = match same {
            Some(s) => {
                let (remote, loaded) = (s.remote.clone(), s.mount.loaded().clone());
                let mount = crate::mount_loaded(&remote, &vref, &loaded, at, &options)
                    .await
                    .map_err(cannot)?;
                (remote, mount)
            }
            None => {
                let host = vref
                    .registry
                    .clone()
                    .unwrap_or_else(VolumeRef::default_registry);
                let insecure = self.insecure_hosts.contains(&host);
                let remote = Remote::connect_with_hosts(&host, insecure, self.hosts_dir.as_deref())
                    .map_err(|e| Status::unavailable(format!("cannot reach {host}: {e}")))?;
                let mount = crate::mount(&remote, &vref, at, &options)
                    .await
                    .map_err(cannot)?;
                (remote, mount)
            }
        };
        tracing::info!(mountpoint = %at.display(), "mounted {reference}");
        mounts.insert(
            at.to_path_buf(),
            Served {
                reference: reference.to_string(),
                owner,
                remote,
                mount,
            },
        );
        Ok(false)
    }

    async fn unmount(&self, at: &Path) -> Result<bool, Status> {
        let served = self.mounts.lock().await.remove(at);
        let Some(served) = served else {
            // Not ours (an earlier manager's): detach what is there.
            let _ = crate::unmount(at, true);
            return Ok(false);
        };
        let how = tokio::task::spawn_blocking(move || served.mount.unmount())
            .await
            .map_err(|e| Status::internal(format!("unmount task: {e}")))?
            .map_err(|e| Status::internal(e.to_string()))?;
        tracing::info!(mountpoint = %at.display(), ?how, "unmounted");
        Ok(how == Unmounted::Detached)
    }
}

#[derive(Clone)]
struct Service(Arc<Manager>);

#[tonic::async_trait]
impl pb::fuse_manager_server::FuseManager for Service {
    async fn mount(
        &self,
        req: Request<pb::MountRequest>,
    ) -> Result<Response<pb::MountResponse>, Status> {
        let r = req.into_inner();
        let prefetch = match r.prefetch.as_str() {
            "" => None,
            p => Some(PrefetchPolicy::parse(p).ok_or_else(|| {
                Status::invalid_argument(format!("prefetch {p:?}: none, open, all or recorded"))
            })?),
        };
        let owner = r.owner.map(|o| (o.uid, o.gid));
        let signed_by = r
            .signed_by
            .iter()
            .map(|k| TrustedKey::from_pem(k.pem.as_bytes(), &k.source))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Status::invalid_argument(format!("trusted key {e}")))?;
        let signature_checked = !signed_by.is_empty();
        let already = self
            .0
            .mount(
                &r.reference,
                Path::new(&r.mountpoint),
                prefetch,
                owner,
                signed_by,
            )
            .await?;
        Ok(Response::new(pb::MountResponse {
            already,
            signature_checked,
        }))
    }

    async fn unmount(
        &self,
        req: Request<pb::UnmountRequest>,
    ) -> Result<Response<pb::UnmountResponse>, Status> {
        let r = req.into_inner();
        let detached = self.0.unmount(Path::new(&r.mountpoint)).await?;
        Ok(Response::new(pb::UnmountResponse { detached }))
    }

    async fn list(
        &self,
        _req: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let mounts = self.0.mounts.lock().await;
        let mounts = mounts
            .iter()
            .map(|(at, s)| {
                let st = s.mount.stats();
                pb::Served {
                    reference: s.reference.clone(),
                    mountpoint: at.display().to_string(),
                    owner: s.owner.map(|(uid, gid)| pb::Owner { uid, gid }),
                    stats: Some(pb::Stats {
                        chunks_downloaded: st.chunks_downloaded,
                        bytes_downloaded: st.bytes_downloaded,
                        chunks_from_disk: st.chunks_from_disk,
                        memory_hits: st.memory_hits,
                        read_errors: st.read_errors,
                        pieces_forged: st.pieces_forged,
                    }),
                }
            })
            .collect();
        Ok(Response::new(pb::ListResponse { mounts }))
    }
}

/// Runs the manager for `config.root` until `stop` resolves, then
/// unmounts what it serves. Refuses to start beside a live manager.
pub async fn serve(
    config: &Config,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), DaemonError> {
    let root = config.root.as_path();
    let socket = root.join(SOCKET);
    let listen = |e: std::io::Error| DaemonError::Listen {
        path: socket.display().to_string(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(root).map_err(listen)?;
    if dial(&socket).await.is_ok() {
        return Err(DaemonError::Listen {
            path: socket.display().to_string(),
            message: "a fuse manager serves this root already".into(),
        });
    }
    match std::fs::remove_file(&socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(listen(e)),
    }
    let listener = tokio::net::UnixListener::bind(&socket).map_err(listen)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(listen)?;
    }
    std::fs::write(root.join(PID_FILE), format!("{}\n", std::process::id())).map_err(listen)?;
    // One cache, opened once: every mount keeps within one bound.
    let mut options = config.mount_options();
    let (dir, size) = (options.cache_dir.clone(), options.cache_size);
    let cache = tokio::task::spawn_blocking(move || match size {
        Some(max) => ChunkCache::open_bounded(&dir, max),
        None => ChunkCache::open(&dir),
    })
    .await
    .map_err(|e| DaemonError::Serve(e.to_string()))?
    .map_err(|e| DaemonError::Store {
        path: options.cache_dir.display().to_string(),
        message: e.to_string(),
    })?;
    options.shared_cache = Some(cache);
    options.shared_downloads = Some(crate::Downloads::default());
    let manager = Arc::new(Manager {
        mounts: Mutex::default(),
        options,
        insecure_hosts: config.insecure_hosts.clone(),
        hosts_dir: config.hosts_dir.clone(),
    });
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tracing::info!(socket = %socket.display(), "fuse manager serving");
    let result = tonic::transport::Server::builder()
        .add_service(pb::fuse_manager_server::FuseManagerServer::new(Service(
            Arc::clone(&manager),
        )))
        .serve_with_incoming_shutdown(incoming, stop)
        .await
        .map_err(|e| DaemonError::Serve(e.to_string()));
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(root.join(PID_FILE));
    let all: Vec<Served> = manager
        .mounts
        .lock()
        .await
        .drain()
        .map(|(_, s)| s)
        .collect();
    let _ = tokio::task::spawn_blocking(move || drop(all)).await;
    result
}

/// How to start a manager: this program with these arguments, to which
/// `--config FILE` is added. The binary that embeds the snapshotter knows.
#[derive(Clone, Debug)]
pub struct Launcher {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// The daemon's handle on the manager; cheap to clone. It holds
/// `[signatures]`: the keys a version must be signed by go with each mount
/// request, so that a daemon restarted with a new policy applies it though
/// the manager (and its copy of the config) lives on.
#[derive(Clone)]
pub struct Keeper {
    client: pb::fuse_manager_client::FuseManagerClient<Channel>,
    signatures: Arc<SignaturePolicy>,
    /// The manager's pid file, for messages.
    pid_file: PathBuf,
}

impl Keeper {
    /// Connects to the manager of `config.root`, starting one (detached,
    /// with `config` written beside its socket) when none listens.
    /// Reads `[signatures]` (its keys) first: a key that cannot be used
    /// fails the start.
    pub async fn attach(config: &Config, launcher: &Launcher) -> Result<Keeper, DaemonError> {
        let signatures = SignaturePolicy::load(&config.signatures)
            .map_err(|e| DaemonError::Signatures(e.to_string()))?;
        let signatures = Arc::new(signatures);
        let socket = config.root.join(SOCKET);
        if let Ok(channel) = dial(&socket).await {
            tracing::info!("re-attached to the running fuse manager");
            return Ok(Keeper::with(
                channel,
                signatures,
                config.root.join(PID_FILE),
            ));
        }
        let err = |message: String| DaemonError::Manager {
            path: socket.display().to_string(),
            message,
        };
        std::fs::create_dir_all(&config.root).map_err(|e| err(e.to_string()))?;
        let file = config.root.join(CONFIG_FILE);
        let text = toml::to_string(config).map_err(|e| err(e.to_string()))?;
        std::fs::write(&file, text).map_err(|e| err(e.to_string()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(config.root.join(LOG_FILE))
            .map_err(|e| err(e.to_string()))?;
        let mut cmd = std::process::Command::new(&launcher.program);
        cmd.args(&launcher.args)
            .arg("--config")
            .arg(&file)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(|e| err(e.to_string()))?)
            .stderr(log);
        {
            use std::os::unix::process::CommandExt as _;
            // Its own session: a signal to the daemon's process group (a
            // terminal's Ctrl+C, a service manager) does not reach it.
            // SAFETY: setsid is async-signal-safe and touches no memory.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|e| err(format!("cannot start: {e}")))?;
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(channel) = dial(&socket).await {
                // Reaped when it exits while this daemon still runs.
                std::thread::spawn(move || child.wait());
                tracing::info!("started a fuse manager");
                return Ok(Keeper::with(
                    channel,
                    signatures,
                    config.root.join(PID_FILE),
                ));
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(err(format!(
                    "it exited ({status}); see {}",
                    config.root.join(LOG_FILE).display()
                )));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(err("it did not listen within 20 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn with(channel: Channel, signatures: Arc<SignaturePolicy>, pid_file: PathBuf) -> Keeper {
        Keeper {
            client: pb::fuse_manager_client::FuseManagerClient::new(channel),
            signatures,
            pid_file,
        }
    }

    /// Mounts `reference` at `at` (with `prefetch` instead of the
    /// configured policy), or confirms it is mounted there.
    pub async fn mount(
        &self,
        reference: &str,
        at: &Path,
        prefetch: Option<PrefetchPolicy>,
    ) -> Result<(), Status> {
        self.mount_owned(reference, at, prefetch, None).await
    }

    /// [`Keeper::mount`], every entry presented as owned by `owner`
    /// (`(uid, gid)`) when given.
    ///
    /// A version `[signatures]` wants signed is mounted only once the
    /// manager has checked that a trusted key signed it; one of a
    /// repository no key is trusted for, while signatures are required,
    /// is refused here. Both refusals are `FAILED_PRECONDITION` with one
    /// line saying why.
    pub async fn mount_owned(
        &self,
        reference: &str,
        at: &Path,
        prefetch: Option<PrefetchPolicy>,
        owner: Option<(u32, u32)>,
    ) -> Result<(), Status> {
        let signed_by = self.signed_by(reference)?;
        let answer = self
            .client
            .clone()
            .mount(pb::MountRequest {
                reference: reference.to_string(),
                mountpoint: at.display().to_string(),
                prefetch: prefetch.map_or("", PrefetchPolicy::as_str).to_string(),
                owner: owner.map(|(uid, gid)| pb::Owner { uid, gid }),
                signed_by: signed_by
                    .iter()
                    .map(|k| pb::TrustedKey {
                        source: k.source.clone(),
                        pem: k.pem(),
                    })
                    .collect(),
            })
            .await?
            .into_inner();
        if !signed_by.is_empty() && !answer.signature_checked {
            // A manager from before signature checks, still running: what
            // it mounted now is taken back.
            if !answer.already {
                let _ = self.unmount(at).await;
            }
            return Err(Status::failed_precondition(format!(
                "{reference}: the running fuse manager does not check signatures; \
                 stop it (`kill $(cat {})`) so that the daemon starts a current one",
                self.pid_file.display()
            )));
        }
        Ok(())
    }

    /// The keys `[signatures]` wants `reference` signed by.
    fn signed_by(&self, reference: &str) -> Result<Vec<TrustedKey>, Status> {
        if self.signatures.is_off() {
            return Ok(Vec::new());
        }
        let vref: VolumeRef = reference
            .parse()
            .map_err(|e| Status::invalid_argument(format!("{reference:?}: {e}")))?;
        self.signatures
            .keys_for(&vref.repository())
            .map_err(|e| Status::failed_precondition(format!("{reference} is refused: {e}")))
    }

    pub async fn unmount(&self, at: &Path) -> Result<(), Status> {
        self.client
            .clone()
            .unmount(pb::UnmountRequest {
                mountpoint: at.display().to_string(),
            })
            .await?;
        Ok(())
    }

    pub async fn list(&self) -> Result<Vec<pb::Served>, Status> {
        Ok(self
            .client
            .clone()
            .list(pb::ListRequest {})
            .await?
            .into_inner()
            .mounts)
    }
}
