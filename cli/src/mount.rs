//! `sealvol mount` and `sealvol umount`: parse the arguments (or the
//! deployment file's `bdn.mounts`), call `sealvol-snapshotter`, say when the
//! mounts are ready, serve until a signal or an unmount, and unmount
//! cleanly. `--daemon` runs the same command again in a new session and
//! returns once that process reports its mounts ready.

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::ValueEnum;
use sealvol_client::CacheDir;
use sealvol_snapshotter::{Engine, MountError, MountOptions, Prefetch, Unmounted};
use sealvol_spec::reference::VolumeRef;

use crate::volume::{self, Conn};

/// Set in the environment of the process `--daemon` starts.
const DETACHED_ENV: &str = "SEALVOL_MOUNT_DETACHED";
/// The detached process's last line on its standard output once every
/// mount is ready; the waiting parent does not print it.
const READY_MARKER: &str = "sealvol-mount-ready";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrefetchArg {
    /// Only what reads touch (plus read-ahead while a file is read in order)
    None,
    /// Also a file's whole content once it is opened
    Open,
    /// Also the whole version, in the background, files opened first
    All,
    /// Also what the version's newest recorded prefetch list names
    /// (`sealvol record`), in the order it was first read
    Recorded,
}

impl From<PrefetchArg> for Prefetch {
    fn from(p: PrefetchArg) -> Prefetch {
        match p {
            PrefetchArg::None => Prefetch::None,
            PrefetchArg::Open => Prefetch::Open,
            PrefetchArg::All => Prefetch::All,
            PrefetchArg::Recorded => Prefetch::Recorded,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// fanotify when root and the kernel has pre-content events, else fuse
    Auto,
    /// The kernel serves reads from local files filled on demand
    /// (fanotify pre-content events; root, Linux 6.14+)
    Fanotify,
    /// This process serves every read through FUSE
    Fuse,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Engine {
        match e {
            EngineArg::Auto => Engine::Auto,
            EngineArg::Fanotify => Engine::Fanotify,
            EngineArg::Fuse => Engine::Fuse,
        }
    }
}

/// The arguments of `sealvol mount`.
#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// bdn:ns/vol[:tag|@digest][/dir]
    #[arg(
        value_name = "REF",
        required_unless_present = "config",
        requires = "mountpoint"
    )]
    pub source: Option<String>,
    /// An existing directory to mount at
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: Option<PathBuf>,
    /// Mount every entry of `bdn.mounts` (`source`, `path`) in this YAML
    /// file; relative paths are relative to the file
    #[arg(long, value_name = "FILE", conflicts_with_all = ["source", "mountpoint"])]
    pub config: Option<PathBuf>,
    /// Chunk cache shared by pulls and mounts (default: ~/.cache/sealvol)
    #[arg(long, value_name = "DIR", env = "SEALVOL_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of the chunk cache: bytes, or with a K, M, G or T suffix
    /// (powers of 1024); least recently used chunks are removed past it
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub cache_size: Option<u64>,
    /// What to fetch before it is read
    #[arg(long, value_enum, default_value_t = PrefetchArg::None)]
    pub prefetch: PrefetchArg,
    /// Who serves the reads
    #[arg(long, value_enum, default_value_t = EngineArg::Auto, env = "SEALVOL_MOUNT_ENGINE")]
    pub engine: EngineArg,
    /// Run in the background; exits 0 once every mount is ready
    #[arg(long)]
    pub daemon: bool,
    /// With --daemon: append the mount's log here (default: discarded)
    #[arg(long, value_name = "FILE", requires = "daemon")]
    pub log_file: Option<PathBuf>,
    /// Seconds a read waits for a chunk before failing with EIO
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub fetch_timeout: u64,
    /// Let other users read the mount (FUSE allow_other)
    #[arg(long)]
    pub allow_other: bool,
    #[command(flatten)]
    pub verification: volume::Verification,
    #[command(flatten)]
    pub conn: Conn,
}

/// `--cache-size`: `1073741824`, `512M`, `10G`, `1TiB`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size: give bytes, or a number with K, M, G or T"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        other => return Err(format!("unknown size unit {other:?}: use K, M, G or T")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// One mount to make.
struct Target {
    /// As the user wrote it, for messages.
    source: String,
    vref: VolumeRef,
    path: PathBuf,
}

/// `bdn.mounts` of a deployment file; other keys are the deployment's own.
#[derive(serde::Deserialize)]
struct Deployment {
    bdn: Option<Bdn>,
}

#[derive(serde::Deserialize)]
struct Bdn {
    #[serde(default)]
    mounts: Vec<MountSpec>,
}

#[derive(serde::Deserialize)]
struct MountSpec {
    source: String,
    path: PathBuf,
}

fn targets(args: &MountArgs) -> anyhow::Result<Vec<Target>> {
    let Some(config) = &args.config else {
        let source = args.source.clone().expect("clap requires REF");
        let path = args.mountpoint.clone().expect("clap requires MOUNTPOINT");
        let vref = volume::parse_ref(&source)?;
        return Ok(vec![Target { source, vref, path }]);
    };
    let text = std::fs::read_to_string(config)
        .with_context(|| format!("cannot read {}", config.display()))?;
    let deployment: Deployment = serde_saphyr::from_str(&text).map_err(|e| {
        // The parser's message can quote the file over several lines.
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("invalid YAML").trim();
        let first = first.strip_prefix("error: ").unwrap_or(first);
        anyhow::anyhow!("{}: {first}", config.display())
    })?;
    let specs = deployment.bdn.map(|b| b.mounts).unwrap_or_default();
    if specs.is_empty() {
        bail!(
            "{}: no mounts; list them under bdn.mounts as {{source: REF, path: DIR}}",
            config.display()
        );
    }
    let base = config.parent().unwrap_or(Path::new("."));
    let mut out: Vec<Target> = Vec::new();
    for spec in specs {
        let vref = volume::parse_ref(&spec.source)
            .with_context(|| format!("{}: bdn.mounts", config.display()))?;
        let path = base.join(&spec.path);
        if out.iter().any(|t| t.path == path) {
            bail!(
                "{}: two mounts at {}; give each its own path",
                config.display(),
                path.display()
            );
        }
        out.push(Target {
            source: spec.source,
            vref,
            path,
        });
    }
    Ok(out)
}

pub fn mount(args: MountArgs) -> anyhow::Result<()> {
    // Arguments are checked before detaching, so their errors show here.
    let targets = targets(&args)?;
    let detached = std::env::var_os(DETACHED_ENV).is_some();
    if args.daemon && !detached {
        return detach_and_wait();
    }
    let CacheDir::At(cache_dir) = CacheDir::chosen(args.cache_dir.clone(), false) else {
        bail!("no cache directory: HOME is not set; give --cache-dir");
    };
    let mut opts = MountOptions::new(cache_dir);
    opts.cache_size = args.cache_size;
    opts.prefetch = args.prefetch.into();
    opts.fetch_timeout = Duration::from_secs(args.fetch_timeout);
    opts.allow_other = args.allow_other;
    opts.legacy = args.verification.legacy();
    opts.signed_by = args.verification.trusted_keys()?;
    opts.engine = args.engine.into();

    // Chunks are megabytes: allocate each with its own mapping, so memory
    // freed when one leaves the cache goes back to the system (glibc would
    // otherwise raise the threshold and keep freed chunks in its heaps).
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
    let rt = volume::runtime()?;
    let mut mounted = Vec::new();
    for t in &targets {
        let registry = t
            .vref
            .registry_or(&VolumeRef::default_registry())
            .to_string();
        let remote = sealvol_client::Remote::connect(&registry, args.conn.insecure)?;
        let mounting = sealvol_snapshotter::mount(&remote, &t.vref, &t.path, &opts);
        // Mounts made so far are unmounted as `mounted` is dropped.
        let m = match rt.block_on(until_signal(mounting))? {
            // A refused signature names the version already.
            Some(Err(e @ MountError::Client(sealvol_client::Error::Unsigned(_)))) => {
                return Err(e.into())
            }
            Some(r) => r.with_context(|| format!("cannot mount {}", t.source))?,
            None => bail!("interrupted before {} was mounted", t.source),
        };
        if !m.verifiable() {
            eprintln!(
                "sealvol: {}",
                sealvol_client::resolve::legacy_warning(m.reference())
            );
        }
        let (engine, why) = m.engine();
        let engine = match engine {
            Engine::Fanotify => "fanotify",
            _ => "fuse",
        };
        // On stderr: stdout's lines are the contract scripts wait on.
        eprintln!("sealvol: engine: {engine} ({why})");
        // Scripts and tests wait for this line.
        println!(
            "sealvol: mounted {} at {}",
            m.reference(),
            m.mountpoint().display()
        );
        mounted.push(m);
    }
    if detached {
        report_ready(args.log_file.as_deref())?;
    }

    // Serve until a signal, or until every mount was unmounted from outside.
    let ended: Vec<_> = mounted.iter().map(|m| m.ended()).collect();
    rt.block_on(until_signal(async {
        futures_util::future::join_all(ended).await;
        Ok::<(), std::convert::Infallible>(())
    }))?;
    let mut failed = None;
    for m in mounted {
        let at = m.mountpoint().to_path_buf();
        match m.unmount() {
            Ok(Unmounted::Clean | Unmounted::Already) => {
                println!("sealvol: unmounted {}", at.display())
            }
            Ok(Unmounted::Detached) => eprintln!(
                "sealvol: {} was busy; detached it (files still open there fail from now on)",
                at.display()
            ),
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Runs `fut` until it ends or SIGINT/SIGTERM arrives; `None` on a signal.
async fn until_signal<T>(fut: impl std::future::Future<Output = T>) -> anyhow::Result<Option<T>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?;
    tokio::select! {
        r = fut => Ok(Some(r)),
        _ = int.recv() => Ok(None),
        _ = term.recv() => Ok(None),
    }
}

/// In the detached process: tells the waiting parent that every mount is
/// ready, then lets go of its pipes (standard output to /dev/null, the log
/// to `log_file` or /dev/null).
fn report_ready(log_file: Option<&Path>) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY_MARKER}")?;
        out.flush()?;
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    let log = match log_file {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .with_context(|| format!("cannot open the log file {}", p.display()))?,
        None => null.try_clone()?,
    };
    // SAFETY: dup2 onto the standard descriptors with descriptors we own;
    // Rust's stdout and stderr handles keep using fds 1 and 2.
    unsafe {
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(log.as_raw_fd(), 2);
    }
    Ok(())
}

/// `--daemon`: starts this command again in a new session, waits until it reports its mounts ready (or fails), prints its
/// lines, and returns, leaving it to serve the mounts.
fn detach_and_wait() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().context("cannot find the sealvol binary")?;
    // The same arguments, `--daemon` included: the environment tells the
    // new process that it is the one to stay.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(DETACHED_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe; it detaches the child from the
    // terminal so that its signals (Ctrl-C, hang-up) do not reach it.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the mount process")?;
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut out = String::new();
    let _ = child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_string(&mut out);
    let errors = errors.join().unwrap_or_default();
    if let Some(lines) = out.strip_suffix(&format!("{READY_MARKER}\n")) {
        eprint!("{errors}");
        print!("{lines}");
        return Ok(());
    }
    let status = child.wait().context("cannot wait for the mount process")?;
    match errors
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("sealvol: "))
    {
        Some(line) => bail!("{line}"),
        None => match errors.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(last) => bail!(
                "the mount process ended ({status}) before its mounts were ready: {}",
                last.trim()
            ),
            None => bail!("the mount process ended ({status}) before its mounts were ready"),
        },
    }
}

/// `sealvol umount MOUNTPOINT`.
pub fn umount(mountpoint: &Path, lazy: bool) -> anyhow::Result<()> {
    sealvol_snapshotter::unmount(mountpoint, lazy)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("7K"), Ok(7 << 10));
        assert!(parse_size("10GB").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn deployment_files_list_mounts_under_bdn() {
        let text = "\
service: api
bdn:
  mounts:
    - source: bdn:weights/llama:prod
      path: /models/llama
    - {source: bdn:weights/lora@b3:0123456789ab, path: lora}
  other: 1
";
        let d: Deployment = serde_saphyr::from_str(text).unwrap();
        let mounts = d.bdn.unwrap().mounts;
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].source, "bdn:weights/llama:prod");
        assert_eq!(mounts[1].path, PathBuf::from("lora"));
    }
}
