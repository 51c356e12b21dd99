//! `sealvol record REF -- CMD…`: mounts the version on an empty cache,
//! runs CMD against the mount (its path as `$SEALVOL_MOUNT`, and in place of
//! every `{}` in CMD's arguments, as `find -exec` does), records which
//! pieces CMD's cold start read first, and pushes that list as a referrer of
//! the version (SPEC.md §5.8), for `sealvol mount --prefetch recorded`.
//! Nothing is pushed when CMD fails or reads nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use sealvol_snapshotter::record::{record_next_mount, Recorder};
use sealvol_snapshotter::MountOptions;
use sealvol_spec::reference::VolumeRef;

use crate::mount::EngineArg;
use crate::output::Output;
use crate::volume::{self, Conn};

/// The variable CMD finds the mountpoint in.
const MOUNT_ENV: &str = "SEALVOL_MOUNT";

/// The arguments of `sealvol record`.
#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// bdn:ns/vol[:tag|@digest] (the whole version is mounted)
    #[arg(value_name = "REF")]
    pub source: String,
    /// The command and its arguments, run without a shell; `{}` in them
    /// stands for the mountpoint, which is also in $SEALVOL_MOUNT
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
    /// Where the empty chunk cache and the mountpoint are made (and removed
    /// afterwards); default: the system's temporary folder
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Who serves the recording mount's reads (both record the same way)
    #[arg(long, value_enum, default_value_t = EngineArg::Auto, env = "SEALVOL_MOUNT_ENGINE")]
    pub engine: EngineArg,
    #[command(flatten)]
    pub verification: volume::Verification,
    #[command(flatten)]
    pub conn: Conn,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// A folder made for this run, removed (with what is in it) when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> anyhow::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt as _;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = parent.join(format!("sealvol-record-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// CMD with every `{}` in its arguments replaced by `mountpoint`, as
/// `find -exec` and `xargs -I {}` do.
fn command_line(cmd: &[OsString], mountpoint: &Path) -> Vec<OsString> {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let at = mountpoint.as_os_str().as_bytes();
    cmd.iter()
        .map(|a| {
            let mut out = Vec::with_capacity(a.len());
            let mut rest = a.as_bytes();
            while let Some(i) = rest.windows(2).position(|w| w == b"{}") {
                out.extend_from_slice(&rest[..i]);
                out.extend_from_slice(at);
                rest = &rest[i + 2..];
            }
            out.extend_from_slice(rest);
            OsString::from_vec(out)
        })
        .collect()
}

pub fn record(args: RecordArgs) -> anyhow::Result<()> {
    let vref = volume::parse_ref(&args.source)?;
    if vref.path.is_some() {
        bail!(
            "record a whole version: give {} without a path",
            args.source
        );
    }
    let registry = vref.registry_or(&VolumeRef::default_registry()).to_string();
    let remote = sealvol_client::Remote::connect(&registry, args.conn.insecure)?;
    let parent = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = Scratch::new(&parent)?;
    let (cache, mnt) = (scratch.0.join("cache"), scratch.0.join("mnt"));
    std::fs::create_dir(&cache).with_context(|| format!("cannot create {}", cache.display()))?;
    std::fs::create_dir(&mnt).with_context(|| format!("cannot create {}", mnt.display()))?;

    let rt = volume::runtime()?;
    let version = rt
        .block_on(sealvol_client::resolve::resolve(&remote, &vref))
        .with_context(|| format!("cannot find {}", args.source))?;
    // An empty cache: every first read reaches the recorder (a warm one
    // would serve some files without this process, through the kernel).
    let mut opts = MountOptions::new(&cache);
    opts.legacy = args.verification.legacy();
    opts.signed_by = args.verification.trusted_keys()?;
    opts.engine = args.engine.into();
    let recorder = Recorder::new();
    record_next_mount(recorder.clone());
    let m = rt
        .block_on(sealvol_snapshotter::mount(
            &remote,
            &version.pinned,
            &mnt,
            &opts,
        ))
        .with_context(|| format!("cannot mount {}", args.source))?;
    if args.output == Output::Text {
        let (engine, why) = m.engine();
        let engine = match engine {
            sealvol_snapshotter::Engine::Fanotify => "fanotify",
            _ => "fuse",
        };
        eprintln!(
            "sealvol: recording {} at {} (engine: {engine}, {why})",
            m.reference(),
            m.mountpoint().display()
        );
    }

    // Ctrl-C reaches CMD too: this process outlives it, to unmount.
    let _signals = {
        use tokio::signal::unix::{signal, SignalKind};
        let _rt = rt.enter();
        (
            signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?,
            signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?,
        )
    };
    let argv = command_line(&args.command, m.mountpoint());
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env(MOUNT_ENV, m.mountpoint())
        .status();
    let unmounted = m.unmount();
    let status = status.with_context(|| format!("cannot run {:?}", argv[0]))?;
    if let Err(e) = unmounted {
        eprintln!("sealvol: {e}");
    }
    if !status.success() {
        bail!("the command failed ({status}); no prefetch list was pushed");
    }
    let list = recorder.list(version.index.digest);
    if list.runs.is_empty() {
        bail!("the command read nothing from the mount; no prefetch list was pushed");
    }
    let pieces: u64 = list.runs.iter().map(|r| r.count).sum();
    let created = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let pushed = rt
        .block_on(sealvol_client::prefetch::push_list(
            &remote, &version, &list, &created,
        ))
        .context("cannot push the prefetch list")?;
    let shown = sealvol_client::resolve::display_ref(&remote, &version.pinned);
    match args.output {
        Output::Json => println!(
            "{}",
            serde_json::json!({
                "version": version.index.digest.to_string(),
                "subject": version.index_digest.to_string(),
                "manifest": pushed.manifest.to_string(),
                "referrers_api": pushed.referrers_api,
                "files": list.files.len(),
                "runs": list.runs.len(),
                "pieces": pieces,
            })
        ),
        Output::Text => println!(
            "sealvol: recorded {pieces} pieces ({} runs) of {} files; pushed {} as a referrer of {shown}{}",
            list.runs.len(),
            list.files.len(),
            pushed.manifest,
            if pushed.referrers_api {
                ""
            } else {
                " (referrers tag schema)"
            }
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_stand_for_the_mountpoint() {
        let cmd: Vec<OsString> = ["cat", "{}", "{}/x", "-"].map(OsString::from).to_vec();
        assert_eq!(
            command_line(&cmd, Path::new("/m")),
            ["cat", "/m", "/m/x", "-"].map(OsString::from).to_vec()
        );
    }
}
