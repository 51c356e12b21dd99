//! `sealvol serve`: the one opening sequence (stores, then [`App`]), the
//! router with its tower layers, and a clean stop on SIGTERM or Ctrl+C
//! (in-flight requests finish, then the database closes). The
//! configuration is [`crate::config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sealvol_sync::NetPolicy;

use crate::auth::{Auth, AuthError};
use crate::config::ConfigError;
pub use crate::config::{Config, HttpConfig, TlsConfig};
use crate::state::app::{App, Lifetimes};
use crate::state::uploads::Uploads;
use crate::store::{MetadataConfig, StorageConfig, Stores};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot read config {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("cannot open the registry data in {path}: {message}")]
    Storage { path: PathBuf, message: String },
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: SocketAddr, message: String },
    #[error("server error: {0}")]
    Serve(String),
    /// A configuration that would expose the registry; the message says
    /// what to set.
    #[error("{0}")]
    Unsafe(String),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("cannot load the TLS certificate {certificate} or key {key}: {message}")]
    Tls {
        certificate: PathBuf,
        key: PathBuf,
        message: String,
    },
}

impl From<ConfigError> for ServeError {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::Read { path, message } => ServeError::Config { path, message },
            ConfigError::Unsafe(message) => ServeError::Unsafe(message),
            ConfigError::Auth(e) => ServeError::Auth(e),
        }
    }
}

/// The secrets key's file in a data folder, unless configured elsewhere.
pub const SECRETS_KEY_FILE: &str = "secrets.key";

/// The one opening sequence of `sealvol serve` and `sealvol serve
/// migrate`: the stores `config` names (`store::open`), with the secrets
/// key in `secrets_key_file` or the data folder, then the upload sessions
/// that survive, into an [`App`].
pub async fn open(config: &Config) -> Result<App, ServeError> {
    let key_file = config
        .secrets_key_file
        .clone()
        .unwrap_or_else(|| config.root.join(SECRETS_KEY_FILE));
    open_app_with(
        &config.root,
        config.lifetimes(),
        &key_file,
        &config.storage,
        &config.metadata,
    )
    .await
}

/// Opens the data folder: blob store, metadata, surviving upload sessions,
/// with the secrets key in the data folder and blobs in it too.
pub async fn open_app(root: &Path, lifetimes: Lifetimes) -> Result<App, ServeError> {
    open_app_with(
        root,
        lifetimes,
        &root.join(SECRETS_KEY_FILE),
        &StorageConfig::default(),
        &MetadataConfig::default(),
    )
    .await
}

/// [`open_app`] with the secrets key in `secrets_key` and blobs where
/// `storage` says.
pub async fn open_app_with(
    root: &Path,
    lifetimes: Lifetimes,
    secrets_key: &Path,
    storage: &StorageConfig,
    metadata: &MetadataConfig,
) -> Result<App, ServeError> {
    let failed = |e: &dyn std::fmt::Display| ServeError::Storage {
        path: root.to_path_buf(),
        message: e.to_string(),
    };
    let Stores { blobs, meta, key } = crate::store::open(root, secrets_key, storage, metadata)
        .map_err(|message| ServeError::Storage {
            path: root.to_path_buf(),
            message,
        })?;
    let mut live = Vec::new();
    for id in meta.uploads().map_err(|e| failed(&e))? {
        // A crash between storing a completed upload and ending its
        // session leaves a session without data; end it, the blob is
        // already stored.
        if blobs
            .upload_size(&id)
            .await
            .map_err(|e| failed(&e))?
            .is_some()
        {
            live.push(id);
        } else {
            meta.finish_upload(&id, None, 0).map_err(|e| failed(&e))?;
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let uploads = Uploads::open(Arc::clone(&blobs), &live, now)
        .await
        .map_err(|e| failed(&e))?;
    let app = App::new(blobs, Arc::new(meta), uploads, lifetimes);
    app.syncs
        .key
        .set(key)
        .expect("a new App has no secrets key yet");
    Ok(app)
}

/// This registry process's name among replicas: made once and kept in the
/// data folder (`replica-id`), so a restarted process resumes its own jobs
/// at once rather than after their leases lapse.
fn replica_id(root: &Path) -> std::io::Result<String> {
    let file = root.join("replica-id");
    match std::fs::read_to_string(&file) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
        Ok(_) => Err(std::io::Error::other(format!(
            "{} is empty",
            file.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            std::fs::write(&file, &id)?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

/// Serves `router` on `listener` (HTTPS when `tls` is given) until
/// `stop`, then lets in-flight requests finish. Each connection holds one
/// of `http.max_connections` slots, taken before it is accepted, so that
/// past the cap clients wait in the listen queue rather than each costing
/// a task and a file; headers (and a TLS handshake) must arrive within
/// `http.read_header_timeout_seconds`.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    tls: Option<axum_server::tls_rustls::RustlsConfig>,
    router: Router,
    http: &HttpConfig,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    use axum_server::accept::Accept as _;
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto;

    let header_timeout = Duration::from_secs(http.read_header_timeout_seconds.max(1));
    let slots = Arc::new(tokio::sync::Semaphore::new(connection_cap(
        http.max_connections,
    )));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new());
    let tls = tls
        .map(|c| axum_server::tls_rustls::RustlsAcceptor::new(c).handshake_timeout(header_timeout));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut stop => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of files or memory, or a connection reset before
                    // it was taken: wait a little rather than spin.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let (builder, tls, watcher) = (builder.clone(), tls.clone(), graceful.watcher());
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _slot = slot;
            // Errors here are the client's (a reset, a timeout, a bad
            // handshake or request line) and end only its connection.
            match tls {
                None => {
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
                Some(tls) => {
                    let Ok((stream, _)) = tls.accept(stream, ()).await else {
                        return;
                    };
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// `max` connections, but at most half the process's open-file limit (the
/// metadata and blob stores open files too), and at least one. The soft
/// limit is raised to the hard one first, as Go's runtime does: services
/// often start with a soft limit of 1024 that the administrator never
/// chose.
fn connection_cap(max: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    let files = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return max.max(1);
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    };
    let cap = max.min(files / 2).max(1);
    if cap < max {
        tracing::warn!(
            "[http] max_connections = {max} is over half the open-file limit ({files}); serving {cap} at once"
        );
    }
    cap
}

/// Waits for SIGTERM or Ctrl+C. The handlers are installed when this is
/// called, not when the future is first polled, so a signal that arrives
/// right after the server says it is ready still stops it cleanly.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("stopping: finishing in-flight requests");
    })
}

/// Serves until SIGTERM or Ctrl+C; `ready` hears the bound address.
pub async fn serve(config: Config, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    // Refuse an exposed configuration before touching the data.
    config.exposure()?;
    let tls = match &config.tls {
        Some(t) => Some(
            axum_server::tls_rustls::RustlsConfig::from_pem_file(&t.certificate, &t.key)
                .await
                .map_err(|e| ServeError::Tls {
                    certificate: t.certificate.clone(),
                    key: t.key.clone(),
                    message: e.to_string(),
                })?,
        ),
        None => None,
    };
    // A registry on loopback may be published by a proxy: one with a
    // public URL counts as reachable from other hosts, and its syncs keep
    // off this host's loopback services too.
    let private = config.addr.ip().is_loopback()
        && config.auth.as_ref().is_none_or(|a| a.public_url.is_none());
    let net = NetPolicy::new(private, config.sync_endpoints.iter().map(String::as_str)).map_err(
        |message| ServeError::Config {
            path: PathBuf::from("registry.toml"),
            message,
        },
    )?;
    // Whatever the registry writes from here on is its owner's alone.
    // SAFETY: umask only swaps the process's file mode mask.
    unsafe { libc::umask(0o077) };
    let mut app = open(&config).await?;
    app.clock = crate::clock::Clock::from_config(config.test_clock);
    if config.upstream.is_some() && config.s3.is_some() {
        return Err(ServeError::Config {
            path: PathBuf::from("registry.toml"),
            message: "a pull-through cache holds no volumes for the S3 gateway to serve: remove [s3], or serve it from the registry the cache reads".into(),
        });
    }
    if let Some(url) = &config.upstream {
        let upstream =
            crate::state::upstream::Upstream::new(&crate::state::upstream::UpstreamConfig {
                url: url.clone(),
                credentials_file: config.upstream_credentials_file.clone(),
                tag_ttl_seconds: config.tag_ttl_seconds,
                cache_size: config.cache_size,
            })
            .map_err(|message| ServeError::Config {
                path: PathBuf::from("registry.toml"),
                message,
            })?;
        app.upstream = Some(Arc::new(upstream));
    }
    let app = Arc::new(app);
    *app.syncs.dirs.write().expect("dirs lock") = crate::state::syncs::DirPolicy {
        data_root: Some(config.root.clone()),
        roots: config.sync_dir_roots.clone(),
    };
    *app.syncs.net.write().expect("net lock") = net;
    let replica = replica_id(&config.root).map_err(|e| ServeError::Storage {
        path: config.root.clone(),
        message: e.to_string(),
    })?;
    let _ = app.syncs.replica.set(replica);
    // A GC pass this replica's previous process left mid-sweep holds every
    // write until its lease lapses; end it before serving (writes and
    // passes would end it too, but other replicas' writes only wait).
    if let Err(e) = crate::service::links::end_dead_pass(&app).await {
        tracing::warn!("could not end a garbage collection pass left unfinished: {e}");
    }
    (app.syncs.lease_seconds).store(
        config.sync_lease_seconds.max(1),
        std::sync::atomic::Ordering::Relaxed,
    );
    (app.syncs.schedule_min_seconds).store(
        config.sync_schedule_min_seconds.max(1),
        std::sync::atomic::Ordering::Relaxed,
    );
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| ServeError::Serve(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| ServeError::Bind {
            addr: config.addr,
            message: e.to_string(),
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Serve(e.to_string()))?;
    // The S3 gateway's listener, bound before the registry says it is
    // ready, so that its clients may start at once.
    let s3_listener =
        match &config.s3 {
            Some(s3) => Some(tokio::net::TcpListener::bind(s3.addr).await.map_err(|e| {
                ServeError::Bind {
                    addr: s3.addr,
                    message: e.to_string(),
                }
            })?),
            None => None,
        };
    let auth = config.auth(addr, Arc::clone(&app.meta))?;
    let signal = shutdown_signal().map_err(|e| ServeError::Serve(e.to_string()))?;
    // One signal stops every listener.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    ready(addr);
    if let Some(l) = &s3_listener {
        if let Ok(a) = l.local_addr() {
            tracing::info!("S3 gateway on {a}");
        }
    }
    // Replicas sharing a metadata store each keep the timer: a pass takes
    // the store-wide GC lease, so one runs and the others skip that tick.
    let collector = (config.gc_interval_seconds > 0).then(|| {
        let (app, every) = (Arc::clone(&app), config.gc_interval_seconds);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(every));
            tick.tick().await; // the first tick is immediate
            loop {
                tick.tick().await;
                match crate::service::gc::collect(&app, false).await {
                    Ok(_) => {}
                    Err(crate::error::RegistryError::Oci {
                        code: crate::error::Code::TooManyRequests,
                        message,
                        ..
                    }) => {
                        tracing::info!("scheduled garbage collection skipped: {message}");
                    }
                    Err(e) => tracing::error!("scheduled garbage collection: {e}"),
                }
            }
        })
    });
    // Garbage collection expires abandoned uploads too, but it may be off
    // or rare; a session's disk space should not wait for it.
    let upload_expiry = {
        let app = Arc::clone(&app);
        let every = config.upload_ttl_seconds.clamp(1, 3600);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(every));
            loop {
                tick.tick().await;
                if let Err(e) = crate::service::uploads::expire(&app).await {
                    tracing::error!("expiring upload sessions: {e}");
                }
            }
        })
    };
    // A cache has no volume API, so no sync jobs to run.
    let sync_workers = match app.upstream {
        Some(_) => 0,
        None => config.sync_workers.max(1),
    };
    let workers = crate::service::syncs::runner::spawn_workers(Arc::clone(&app), sync_workers);
    // Schedules start jobs only where jobs run.
    let schedules = (sync_workers > 0).then(|| {
        tokio::spawn(crate::service::syncs::schedules::run_schedules(Arc::clone(
            &app,
        )))
    });
    let s3 = s3_listener.map(|listener| {
        let router =
            crate::http::s3::router(Arc::clone(&app), Arc::clone(&auth), timeouts(&config));
        let (tls, http, stop) = (tls.clone(), config.http.clone(), stopped(stop_rx.clone()));
        tokio::spawn(async move { serve_connections(listener, tls, router, &http, stop).await })
    });
    let router = router(Arc::clone(&app), auth, &config, prometheus);
    let served = serve_connections(listener, tls, router, &config.http, stopped(stop_rx)).await;
    let s3_served = match s3 {
        Some(task) => task
            .await
            .unwrap_or_else(|e| Err(ServeError::Serve(format!("the S3 gateway stopped: {e}")))),
        None => Ok(()),
    };
    if let Some(c) = collector {
        c.abort();
        let _ = c.await;
    }
    upload_expiry.abort();
    let _ = upload_expiry.await;
    if let Some(s) = schedules {
        s.abort();
        let _ = s.await;
    }
    // A job stopped here is queued again at the next start and resumes
    // from its last finished file.
    for w in workers {
        w.abort();
        let _ = w.await;
    }
    served?;
    s3_served?;
    // The last reference: dropping it closes the database.
    drop(app);
    tracing::info!("stopped");
    Ok(())
}

/// The registry's router with its layers, for `registry.toml`'s timeouts
/// (`http::router`).
pub fn router(
    app: Arc<App>,
    auth: Arc<Auth>,
    config: &Config,
    prometheus: PrometheusHandle,
) -> Router {
    crate::http::router(app, auth, timeouts(config), prometheus)
}

fn timeouts(config: &Config) -> crate::http::Timeouts {
    crate::http::Timeouts {
        request: Duration::from_secs(config.request_timeout_seconds),
        idle_body: Duration::from_secs(config.http.idle_timeout_seconds.max(1)),
    }
}
