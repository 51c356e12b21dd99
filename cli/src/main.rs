//! `sealvol`: the one command of sealvol. It parses arguments, calls the
//! libraries and prints; every behaviour lives in a library crate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sealvol_client::{CacheDir, ReadMode, SealOptions};

mod admin;
mod ask;
mod expiry;
mod lifecycle;
mod mount;
mod output;
mod progress;
mod record;
mod schedule;
mod signature;
mod sync;
mod verify;
mod volume;

use output::Output;

#[derive(Parser)]
#[command(
    name = "sealvol",
    version,
    about = "Publish model data once, get a digest, mount it anywhere"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the registry: OCI Distribution v1.1 on loopback, data in one folder
    #[command(args_conflicts_with_subcommands = true)]
    Serve {
        #[command(subcommand)]
        action: Option<ServeAction>,
        /// registry.toml (fields: addr, root, request_timeout_seconds, retention_seconds,
        /// gc_grace_seconds, gc_interval_seconds, claim_ttl_seconds, upload_ttl_seconds,
        /// sync_workers, sync_dir_roots, sync_endpoints, secrets_key_file, allow_plain_http,
        /// allow_anonymous_writes, test_clock, upstream, upstream_credentials_file,
        /// tag_ttl_seconds, cache_size, sync_lease_seconds,
        /// sync_schedule_min_seconds; tables [tls], [auth], [storage],
        /// [metadata], [http] with read_header_timeout_seconds (10), idle_timeout_seconds (60),
        /// max_connections (4096), [s3] with addr (the S3 gateway's listener; none without it))
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Address to listen on (default 127.0.0.1:5000; port 0 picks one)
        #[arg(long, value_name = "HOST:PORT")]
        addr: Option<std::net::SocketAddr>,
        /// Folder for blobs, uploads and metadata (default ./sealvol-data)
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Serve plain HTTP off loopback (behind a TLS-terminating proxy)
        #[arg(long)]
        allow_plain_http: bool,
        /// Without [auth] off loopback, let anyone pull, push and delete (never admin)
        #[arg(long)]
        allow_anonymous_writes: bool,
        /// Run as a pull-through cache of this registry (http(s)://host[:port]):
        /// serve what it holds, keep what was fetched, refuse pushes
        #[arg(long, value_name = "URL")]
        upstream: Option<String>,
    },
    /// Seal a directory locally and print its version digest (nothing is uploaded)
    Seal {
        dir: PathBuf,
        /// Only include paths matching this glob (repeatable; `*` crosses `/`)
        #[arg(long = "include", value_name = "GLOB")]
        includes: Vec<String>,
        /// Leave out paths matching this glob (repeatable; wins over --include)
        #[arg(long = "exclude", value_name = "GLOB")]
        excludes: Vec<String>,
        /// Worker threads (default: one per core)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        /// Directory of the file-state cache (default: ~/.cache/sealvol)
        #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        /// Read every file even if the file-state cache knows it
        #[arg(long)]
        no_cache: bool,
        /// Read files with read(2) instead of mapping them (slower; for
        /// filesystems where mapping fails or misbehaves)
        #[arg(long)]
        no_mmap: bool,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Seal a directory and publish it; only chunks the registry lacks are sent
    Push {
        dir: PathBuf,
        /// bdn:ns/vol[:tag] or host[:port]/ns/vol[:tag]
        #[arg(value_name = "REF")]
        target: String,
        /// Also point this tag at the new version (repeatable)
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// Only include paths matching this glob (repeatable; `*` crosses `/`)
        #[arg(long = "include", value_name = "GLOB")]
        includes: Vec<String>,
        /// Leave out paths matching this glob (repeatable; wins over --include)
        #[arg(long = "exclude", value_name = "GLOB")]
        excludes: Vec<String>,
        /// Parallel uploads (default 8)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        /// File-state and chunk cache (default: ~/.cache/sealvol)
        #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        /// Use no cache: read every file, and ask the registry about every chunk
        #[arg(long)]
        no_cache: bool,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Download a version, or a path inside it, into a directory
    Pull {
        /// bdn:ns/vol[:tag|@digest][/path]
        #[arg(value_name = "REF")]
        source: String,
        dir: PathBuf,
        /// Only files matching this glob, relative to what is pulled (repeatable)
        #[arg(long = "include", value_name = "GLOB")]
        includes: Vec<String>,
        /// Parallel downloads (default 8)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        /// Chunk cache shared by pulls and mounts (default: ~/.cache/sealvol)
        #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        /// Keep no copy of the chunks in the cache (half the disk writes; a
        /// later pull of the same data downloads it again)
        #[arg(long)]
        no_cache: bool,
        /// Apply the setuid, setgid and sticky bits the version records
        /// (by default only the rwx bits are applied)
        #[arg(long)]
        keep_special_bits: bool,
        #[command(flatten)]
        verification: volume::Verification,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// List namespaces (no ref), a namespace's volumes, or a version's entries
    Ls {
        #[arg(value_name = "REF")]
        target: Option<String>,
        /// All entries below the path, not only its immediate children
        #[arg(long, short = 'r')]
        recursive: bool,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Describe a version, or one entry of it
    Stat {
        #[arg(value_name = "REF")]
        target: String,
        /// Print only the version's full ref (bdn:ns/vol@b3:<hex>)
        #[arg(long, conflicts_with = "oci_ref")]
        full_ref: bool,
        /// Print only the version index's OCI reference (HOST/ns/vol@sha256:<hex>), which
        /// runtimes pull and Kubernetes image volumes name
        #[arg(long)]
        oci_ref: bool,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Write a file of a version to standard output
    Cat {
        /// bdn:ns/vol[:tag|@digest]/path
        #[arg(value_name = "REF")]
        target: String,
        /// Chunks fetched ahead (default 4)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        #[command(flatten)]
        verification: volume::Verification,
        #[command(flatten)]
        conn: volume::Conn,
    },
    /// Check that a registry holds exactly a pinned version (REF [--deep]), or
    /// that a directory holds exactly its files (DIR REF, or DIR --digest b3:<hex>)
    Verify {
        /// REF, or DIR when a REF or --digest follows
        #[arg(value_name = "REF|DIR")]
        first: String,
        /// The version a directory is checked against
        #[arg(value_name = "REF")]
        second: Option<String>,
        /// Check a directory against a bare version digest (says only match or mismatch)
        #[arg(long, value_name = "b3:<hex>")]
        digest: Option<String>,
        /// Also fetch every chunk again and check every byte through the chain
        #[arg(long)]
        deep: bool,
        /// Check instead that this public key (PEM) signed the version
        /// (repeatable: any of the keys will do); reads the tree and the
        /// signatures, no chunk
        #[arg(long = "signed-by", value_name = "PUBKEY.pem", conflicts_with_all = ["second", "digest", "deep"])]
        signed_by: Vec<PathBuf>,
        /// Parallel requests (default 8)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Sign a version from its tree alone (an OpenSSF model-signing statement
    /// listing every file's BLAKE3), attached as a referrer of the version
    Sign {
        #[arg(value_name = "REF")]
        target: String,
        /// The private key: a PEM file, or env://VAR to read the PEM from
        /// the environment variable VAR (ECDSA P-256/P-384 or Ed25519)
        #[arg(long, value_name = "KEY.pem|env://VAR")]
        key: String,
        /// Also attach a `cosign sign` signature of the version index, which
        /// `cosign verify --key` and admission controllers check
        #[arg(long)]
        cosign: bool,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// List a version's signatures: signer, time, and whether each verifies
    Signatures {
        #[arg(value_name = "REF")]
        target: String,
        /// A public key (PEM) to check them against (repeatable)
        #[arg(long = "signed-by", value_name = "PUBKEY.pem")]
        signed_by: Vec<PathBuf>,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Re-publish a version whose tree index is format 1 with a format 2 tree
    /// (from the registry's own chunks), under the same digest and tags
    Upgrade {
        #[arg(value_name = "REF")]
        target: String,
        /// Chunks fetched ahead (default 8)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// List a volume's versions, newest first (from the registry's volume API, or from its tags on any registry)
    Versions {
        #[arg(value_name = "REF")]
        target: String,
        /// Parallel lookups (default 8)
        #[arg(long, value_name = "N", default_value_t = 0)]
        jobs: usize,
        /// Also list deleted versions that can still be restored (needs the volume API)
        #[arg(long)]
        include_tombstoned: bool,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Delete a version, or every version of a volume (restorable within the registry's retention)
    Rm {
        /// bdn:ns/vol@b3:<digest or prefix>, or bdn:ns/vol with --recursive
        #[arg(value_name = "REF")]
        target: String,
        /// Delete every version of the volume
        #[arg(long, short = 'r')]
        recursive: bool,
        /// Delete without asking (required when standard input is not a terminal)
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Bring back a deleted version (within the registry's retention)
    Restore {
        /// bdn:ns/vol@b3:<64 hex> or bdn:ns/vol@sha256:<64 hex>
        #[arg(value_name = "REF")]
        target: String,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Change a volume: when all its versions expire
    Update {
        /// bdn:ns/vol
        #[arg(value_name = "REF")]
        target: String,
        /// RFC 3339 UTC time (2026-12-09T00:00:00Z), a duration from now (24h, 7d), or `never`
        #[arg(long, value_name = "TIME|never")]
        expires_at: String,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run the registry's garbage collection now: expiry, purging, unreferenced blobs
    Gc {
        /// Report what would be deleted, delete nothing
        #[arg(long)]
        dry_run: bool,
        /// host[:port] (default: the default registry)
        #[arg(long, value_name = "HOST")]
        registry: Option<String>,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Create, move or delete tags
    Tag {
        #[command(subcommand)]
        action: TagAction,
    },
    /// What changed between two versions: files, bytes, shared chunks
    Diff {
        #[arg(value_name = "REF_A")]
        a: String,
        #[arg(value_name = "REF_B")]
        b: String,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Mount a version read-only (FUSE); files appear at once, bytes stream in as they are read
    Mount(mount::MountArgs),
    /// Mount a version, run CMD on it, and push the order of its first reads
    /// as the version's prefetch list (for `mount --prefetch recorded`)
    Record(record::RecordArgs),
    /// Unmount a sealvol mount; the process serving it then exits
    Umount {
        mountpoint: PathBuf,
        /// Detach it even while files are open (they fail once its process exits)
        #[arg(long, short = 'l')]
        lazy: bool,
    },
    /// Copy a Hugging Face repo, bucket, folder or remote version into a volume: a job the registry runs
    Sync {
        #[command(subcommand)]
        action: sync::SyncAction,
    },
    /// Credentials on the registry for sync jobs; values are read from standard input
    Secret {
        #[command(subcommand)]
        action: sync::SecretAction,
    },
    /// Run the containerd snapshotter: a proxy plugin serving snapshots on a unix socket
    Snapshotter {
        /// snapshotter.toml (root, address, containerd_address, cache_dir, cache_size,
        /// prefetch, engine, fetch_timeout_seconds, insecure_hosts, hosts_dir,
        /// metrics_address, [signatures])
        #[arg(long, value_name = "FILE", global = true)]
        config: Option<PathBuf>,
        /// Where snapshots live (default /var/lib/sealvol/snapshotter)
        #[arg(long, value_name = "DIR", global = true)]
        root: Option<PathBuf>,
        /// The unix socket containerd connects to (default /run/sealvol/snapshotter.sock)
        #[arg(long, value_name = "SOCKET", global = true)]
        address: Option<PathBuf>,
        #[command(subcommand)]
        part: Option<SnapshotterPart>,
    },
    /// Registry administration: API keys
    Admin {
        #[command(subcommand)]
        action: admin::AdminAction,
    },
    /// Store credentials for a registry in docker's config.json
    Login {
        /// host[:port] (default: the default registry)
        registry: Option<String>,
        #[arg(long, short = 'u')]
        username: Option<String>,
        /// Read the password from standard input
        #[arg(long)]
        password_stdin: bool,
        #[command(flatten)]
        conn: volume::Conn,
    },
}

#[derive(Subcommand)]
enum TagAction {
    /// Point a tag at a version (creating or moving it)
    Set {
        /// The version: bdn:ns/vol[:tag|@digest]
        #[arg(
            value_name = "REF",
            required_unless_present = "volume_ref",
            conflicts_with = "volume_ref"
        )]
        target: Option<String>,
        /// The tag to set
        #[arg(
            value_name = "TAG",
            required_unless_present = "tag",
            conflicts_with = "tag"
        )]
        name: Option<String>,
        /// The version (same as REF)
        #[arg(long, value_name = "REF")]
        volume_ref: Option<String>,
        /// The tag to set (same as TAG)
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        /// Remove the tag at this RFC 3339 UTC time (2026-12-09T00:00:00Z) or after this duration (24h, 7d); needs the volume API
        #[arg(long, value_name = "TIME")]
        expires_at: Option<String>,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Delete a tag (the version stays)
    Delete {
        /// bdn:ns/vol:tag
        #[arg(value_name = "REF")]
        target: String,
        #[command(flatten)]
        conn: volume::Conn,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// Sealing maps files into memory; a file truncated by another process
/// while mapped raises SIGBUS. Turn that into a clear error instead of a
/// crash. Only async-signal-safe calls (`write`, `_exit`) are made.
fn exit_cleanly_on_sigbus() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        const MSG: &[u8] = b"sealvol: a file shrank while it was being read; run the command again once the files are stable\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(1);
        }
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

/// glibc gives each thread that allocates its own arena, up to 8 per core,
/// and an arena keeps what is freed in it. Pulls and mounts move megabyte
/// chunks through many short-lived blocking threads, so freed chunk buffers
/// pile up in arenas: a warm pull of 1 GiB peaked at 180-250 MB RSS with the
/// default and at 72-80 MB with two arenas, no slower.
fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread
    // other than main exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() -> ExitCode {
    exit_cleanly_on_sigbus();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. }) {
        limit_malloc_arenas();
    }
    // A server says what it does; one-shot commands speak only when asked.
    // A mount logs reads that fail; fuser's own warnings are about
    // requests the mount answers on purpose.
    let default_level = match cli.command {
        Command::Serve { .. } | Command::Snapshotter { .. } => "info",
        Command::Mount(_) | Command::Record(_) => "warn,fuser=error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SEALVOL_LOG")
                .unwrap_or_else(|_| default_level.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sealvol: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(
    config: Option<PathBuf>,
    addr: Option<std::net::SocketAddr>,
    root: Option<PathBuf>,
    allow_plain_http: bool,
    allow_anonymous_writes: bool,
    upstream: Option<String>,
) -> anyhow::Result<()> {
    let mut cfg = match config {
        Some(path) => sealvol_registry::Config::load(&path)?,
        None => sealvol_registry::Config::default(),
    };
    if let Some(a) = addr {
        cfg.addr = a;
    }
    if let Some(r) = root {
        cfg.root = r;
    }
    cfg.allow_plain_http |= allow_plain_http;
    cfg.allow_anonymous_writes |= allow_anonymous_writes;
    if upstream.is_some() {
        cfg.upstream = upstream;
    }
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(sealvol_registry::serve(cfg, |addr| {
        // Scripts and tests wait for this line to learn the port.
        println!("sealvol: serving OCI distribution on {scheme}://{addr}");
    }))?;
    Ok(())
}

/// What `sealvol serve` does besides serving.
#[derive(Subcommand)]
enum ServeAction {
    /// Copy a stopped registry's whole state (blobs, manifests, tags with expiry, versions
    /// with tombstones, sync jobs, keys, secrets) into an empty one on other backends
    Migrate {
        /// registry.toml of the registry to copy from
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        /// registry.toml of the (empty) registry to copy into
        #[arg(long, value_name = "FILE")]
        to: PathBuf,
    },
}

fn migrate(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    let (a, b) = (
        sealvol_registry::Config::load(from)?,
        sealvol_registry::Config::load(to)?,
    );
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let r = runtime.block_on(sealvol_registry::migrate::migrate(&a, &b))?;
    println!(
        "sealvol: migrated {} blob(s) ({} bytes; {} already there), {} metadata row(s) and {} secret(s) from {} to {}",
        r.blobs,
        r.blob_bytes,
        r.blobs_present,
        r.rows,
        r.secrets,
        from.display(),
        to.display()
    );
    Ok(())
}

/// The snapshotter's second process, which the daemon starts itself.
#[derive(Subcommand)]
enum SnapshotterPart {
    /// The fuse manager holding the versions' FUSE sessions (started by the daemon)
    #[command(hide = true)]
    FuseManager,
}

fn snapshotter(
    config: Option<PathBuf>,
    root: Option<PathBuf>,
    address: Option<PathBuf>,
    part: Option<SnapshotterPart>,
) -> anyhow::Result<()> {
    use sealvol_snapshotter::containerd;
    let mut cfg = match config {
        Some(path) => containerd::Config::load(&path)?,
        None => containerd::Config::default(),
    };
    if let Some(r) = root {
        cfg.root = r;
    }
    if let Some(a) = address {
        cfg.address = a;
    }
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let stop = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        if let Some(SnapshotterPart::FuseManager) = part {
            containerd::fuse_manager::serve(&cfg, stop).await?;
            return Ok(());
        }
        let launcher = containerd::fuse_manager::Launcher {
            program: std::env::current_exe().context("cannot find this program's path")?,
            args: vec!["snapshotter".into(), "fuse-manager".into()],
        };
        let address = cfg.address.display().to_string();
        containerd::serve(
            &cfg,
            &launcher,
            // Scripts and tests wait for this line.
            || println!("sealvol: serving containerd snapshots on {address}"),
            stop,
        )
        .await?;
        anyhow::Ok(())
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            action: Some(ServeAction::Migrate { from, to }),
            ..
        } => migrate(&from, &to),
        Command::Serve {
            action: None,
            config,
            addr,
            root,
            allow_plain_http,
            allow_anonymous_writes,
            upstream,
        } => serve(
            config,
            addr,
            root,
            allow_plain_http,
            allow_anonymous_writes,
            upstream,
        ),
        Command::Push {
            dir,
            target,
            tags,
            includes,
            excludes,
            jobs,
            cache_dir,
            no_cache,
            conn,
            output,
        } => volume::push(
            &dir,
            &target,
            &tags,
            includes,
            excludes,
            jobs,
            CacheDir::chosen(cache_dir, no_cache),
            &conn,
            output,
        ),
        Command::Pull {
            source,
            dir,
            includes,
            jobs,
            cache_dir,
            no_cache,
            keep_special_bits,
            verification,
            conn,
            output,
        } => volume::pull(
            &source,
            &dir,
            includes,
            jobs,
            CacheDir::chosen(cache_dir, no_cache),
            keep_special_bits,
            verification,
            &conn,
            output,
        ),
        Command::Ls {
            target,
            recursive,
            conn,
            output,
        } => volume::ls(target.as_deref(), recursive, &conn, output),
        Command::Stat {
            target,
            full_ref,
            oci_ref,
            conn,
            output,
        } => volume::stat(&target, full_ref, oci_ref, &conn, output),
        Command::Cat {
            target,
            jobs,
            cache_dir,
            verification,
            conn,
        } => volume::cat(
            &target,
            jobs,
            CacheDir::chosen(cache_dir, false),
            verification,
            &conn,
        ),
        Command::Verify {
            first,
            signed_by,
            conn,
            output,
            ..
        } if !signed_by.is_empty() => signature::verify(&first, &signed_by, &conn, output),
        Command::Sign {
            target,
            key,
            cosign,
            conn,
            output,
        } => signature::sign(&target, &key, cosign, &conn, output),
        Command::Signatures {
            target,
            signed_by,
            conn,
            output,
        } => signature::list(&target, &signed_by, &conn, output),
        Command::Verify {
            first,
            second,
            digest,
            deep,
            jobs,
            cache_dir,
            conn,
            output,
            ..
        } => verify::verify(
            &first,
            second.as_deref(),
            digest.as_deref(),
            deep,
            jobs,
            CacheDir::chosen(cache_dir, false),
            &conn,
            output,
        ),
        Command::Upgrade {
            target,
            jobs,
            cache_dir,
            conn,
            output,
        } => verify::upgrade(
            &target,
            jobs,
            CacheDir::chosen(cache_dir, false),
            &conn,
            output,
        ),
        Command::Versions {
            target,
            jobs,
            include_tombstoned,
            conn,
            output,
        } => volume::versions(&target, jobs, include_tombstoned, &conn, output),
        Command::Rm {
            target,
            recursive,
            yes,
            conn,
            output,
        } => lifecycle::rm(&target, recursive, yes, &conn, output),
        Command::Restore {
            target,
            conn,
            output,
        } => lifecycle::restore(&target, &conn, output),
        Command::Update {
            target,
            expires_at,
            conn,
            output,
        } => lifecycle::update(&target, &expires_at, &conn, output),
        Command::Gc {
            dry_run,
            registry,
            conn,
            output,
        } => lifecycle::gc(dry_run, registry, &conn, output),
        Command::Tag { action } => match action {
            TagAction::Set {
                target,
                name,
                volume_ref,
                tag,
                expires_at,
                conn,
                output,
            } => {
                // clap requires one of each pair.
                let (Some(target), Some(tag)) = (target.or(volume_ref), name.or(tag)) else {
                    anyhow::bail!("give the version and the tag: sealvol tag set REF TAG");
                };
                volume::tag_set(&target, &tag, expires_at.as_deref(), &conn, output)
            }
            TagAction::Delete {
                target,
                conn,
                output,
            } => volume::tag_delete(&target, &conn, output),
        },
        Command::Diff { a, b, conn, output } => volume::diff(&a, &b, &conn, output),
        Command::Mount(args) => mount::mount(args),
        Command::Record(args) => record::record(args),
        Command::Umount { mountpoint, lazy } => mount::umount(&mountpoint, lazy),
        Command::Sync { action } => sync::run(action),
        Command::Secret { action } => sync::run_secret(action),
        Command::Admin { action } => admin::run(action),
        Command::Snapshotter {
            config,
            root,
            address,
            part,
        } => snapshotter(config, root, address, part),
        Command::Login {
            registry,
            username,
            password_stdin,
            conn,
        } => volume::login(registry, username, password_stdin, &conn),
        Command::Seal {
            dir,
            includes,
            excludes,
            jobs,
            cache_dir,
            no_cache,
            no_mmap,
            output,
        } => {
            let mut opts = SealOptions {
                includes,
                excludes,
                threads: jobs,
                read_mode: if no_mmap {
                    ReadMode::Read
                } else {
                    ReadMode::Mmap
                },
                ..SealOptions::default()
            };
            opts.cache_dir = CacheDir::chosen(cache_dir, no_cache);
            let sealed = sealvol_client::seal(&dir, &opts)
                .with_context(|| format!("cannot seal {}", dir.display()))?;
            let s = &sealed.stats;
            match output {
                Output::Json => {
                    let v = serde_json::json!({
                        "digest": sealed.digest.to_string(),
                        "files": s.files,
                        "dirs": s.dirs,
                        "symlinks": s.symlinks,
                        "bytes": s.bytes,
                        "chunks": s.chunks,
                        "unique_chunks": s.unique_chunks,
                        "unique_bytes": s.unique_bytes,
                        "files_read": sealed.files_read,
                        "bytes_read": sealed.bytes_read,
                        "duration_seconds": sealed.duration.as_secs_f64(),
                    });
                    println!("{v}");
                }
                Output::Text => {
                    println!("{}", sealed.digest);
                    eprintln!(
                        "{} files, {} bytes, {} chunks ({} unique) in {:.2}s",
                        s.files,
                        s.bytes,
                        s.chunks,
                        s.unique_chunks,
                        sealed.duration.as_secs_f64()
                    );
                }
            }
            Ok(())
        }
    }
}
