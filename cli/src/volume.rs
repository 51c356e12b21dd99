//! The commands that talk to a registry: push, pull, ls, stat, cat,
//! versions, tag, diff, login (those that need the volume API are in
//! `lifecycle`). Each parses its refs, calls the client
//! library and prints text (or one JSON document with `--output json`).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use sealvol_client::inspect::{self, EntryInfo};
use sealvol_client::pull::PullOptions;
use sealvol_client::push::PushOptions;
use sealvol_client::resolve::{check_legacy, display_ref, legacy_warning, Legacy};
use sealvol_client::signature::TrustedKey;
use sealvol_client::{CacheDir, Remote};
use sealvol_spec::reference::{is_name_component, VolumeRef};

use crate::output::Output;
use crate::progress;

/// Flags every registry command shares.
#[derive(clap::Args, Clone, Debug)]
pub struct Conn {
    /// Use plain HTTP even for a registry that is not on loopback
    #[arg(long, global = true)]
    pub insecure: bool,
}

/// What to do with a version whose tree index is format 1 (SPEC.md §2.6).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Verification {
    /// Refuse a version whose bytes cannot be verified against its digest
    /// (a format 1 tree index) instead of reading it with a warning
    #[arg(long)]
    pub require_verified: bool,
    /// Refuse a version this public key (PEM) did not sign; repeatable: any
    /// of the keys will do
    #[arg(long = "require-signature", value_name = "PUBKEY.pem")]
    pub require_signature: Vec<PathBuf>,
}

impl Verification {
    /// The keys of `--require-signature`.
    pub fn trusted_keys(&self) -> anyhow::Result<Vec<TrustedKey>> {
        trusted_keys(&self.require_signature)
    }

    pub fn legacy(&self) -> Legacy {
        if self.require_verified {
            Legacy::Refuse
        } else {
            Legacy::Warn
        }
    }
}

/// Reads public keys (PEM) a caller trusts.
pub fn trusted_keys(paths: &[PathBuf]) -> anyhow::Result<Vec<TrustedKey>> {
    Ok(paths
        .iter()
        .map(|p| TrustedKey::load(p))
        .collect::<Result<_, _>>()?)
}

pub fn parse_ref(s: &str) -> anyhow::Result<VolumeRef> {
    s.parse::<VolumeRef>().map_err(|e| anyhow::anyhow!("{e}"))
}

pub(crate) fn connect(vref: &VolumeRef, conn: &Conn) -> anyhow::Result<Remote> {
    let registry = vref.registry_or(&VolumeRef::default_registry()).to_string();
    Ok(Remote::connect(&registry, conn.insecure)?)
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().context("cannot start the async runtime")
}

/// Runs `fut` until it ends or SIGINT/SIGTERM arrives; on a signal the
/// future is dropped (running its cleanup) and the command fails.
async fn until_signal<T, E>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
    tokio::select! {
        r = fut => Ok(r?),
        _ = tokio::signal::ctrl_c() => bail!("interrupted; run the same command again to resume"),
        _ = term.recv() => bail!("terminated; run the same command again to resume"),
    }
}

pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[allow(clippy::too_many_arguments)]
pub fn push(
    dir: &Path,
    target: &str,
    tags: &[String],
    includes: Vec<String>,
    excludes: Vec<String>,
    jobs: usize,
    cache: CacheDir,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let tags = tags
        .iter()
        .map(|t| inspect::user_tag(t))
        .collect::<Result<Vec<_>, _>>()?;
    let remote = connect(&vref, conn)?;
    let mut seal = sealvol_client::SealOptions {
        includes,
        excludes,
        read_mode: sealvol_client::ReadMode::Mmap,
        ..Default::default()
    };
    seal.cache_dir = cache.clone();
    let opts = PushOptions {
        seal,
        tags,
        jobs,
        cache_dir: cache,
    };
    let progress = progress::for_terminal(output == Output::Json);
    let report = match runtime()?.block_on(sealvol_client::push::push(
        &remote, dir, &vref, &opts, progress,
    )) {
        Ok(report) => report,
        // Another push holds the volume: the message names the volume and
        // what to do; the directory is not the problem.
        Err(e @ sealvol_client::Error::Conflict(_)) => return Err(e.into()),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot push {}", dir.display())))
        }
    };
    match output {
        Output::Json => print_json(&report)?,
        Output::Text => {
            println!("{}", report.reference);
            if report.already_present {
                eprintln!(
                    "{} files, {}: already on the registry; tags moved: {}",
                    report.files,
                    human(report.bytes),
                    report.tags.join(", ")
                );
            } else {
                eprintln!(
                    "{} files, {}; sent {} of {} chunks ({} in all, manifests included), mounted {}, in {:.2}s; tags: {}",
                    report.files,
                    human(report.bytes),
                    report.chunks_uploaded,
                    report.chunks,
                    human(report.bytes_uploaded),
                    report.chunks_mounted,
                    report.duration_seconds,
                    report.tags.join(", ")
                );
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn pull(
    source: &str,
    dir: &Path,
    includes: Vec<String>,
    jobs: usize,
    cache: CacheDir,
    keep_special_bits: bool,
    verification: Verification,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(source)?;
    let remote = connect(&vref, conn)?;
    let opts = PullOptions {
        includes,
        jobs,
        cache_dir: cache,
        legacy: verification.legacy(),
        keep_special_bits,
        signed_by: verification.trusted_keys()?,
    };
    if keep_special_bits {
        eprintln!("sealvol: keeping the setuid, setgid and sticky bits the version records (--keep-special-bits)");
    }
    let progress = progress::for_terminal(output == Output::Json);
    // Stopping a pull drops its future, which removes its partial files.
    let report = runtime()?.block_on(until_signal(sealvol_client::pull::pull(
        &remote, &vref, dir, &opts, progress,
    )))?;
    if !report.verifiable {
        eprintln!("sealvol: {}", legacy_warning(&report.reference));
    }
    match output {
        Output::Json => print_json(&report)?,
        Output::Text => {
            println!("{}", report.reference);
            eprintln!(
                "{} files, {}; downloaded {} chunks ({}), {} from cache, {} files already present, in {:.2}s",
                report.files,
                human(report.bytes),
                report.chunks_downloaded,
                human(report.bytes_downloaded),
                report.chunks_from_cache,
                report.files_present,
                report.duration_seconds
            );
        }
    }
    Ok(())
}

fn print_entries(entries: &[EntryInfo]) {
    let mut out = std::io::stdout().lock();
    for e in entries {
        let suffix = match (&e.target, e.kind) {
            (Some(t), _) => format!(" -> {t}"),
            (None, inspect::EntryKind::Dir) => "/".to_string(),
            _ => String::new(),
        };
        let _ = writeln!(out, "{} {:>12} {}{suffix}", e.mode, e.size, e.path);
    }
}

pub fn ls(
    target: Option<&str>,
    recursive: bool,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let rt = runtime()?;
    // No ref: namespaces. A bare namespace: its volumes.
    let namespace = match target {
        None => None,
        Some(t) => {
            let bare = t.strip_prefix("bdn:").unwrap_or(t);
            if is_name_component(bare) {
                Some(bare.to_string())
            } else {
                None
            }
        }
    };
    if target.is_none() || namespace.is_some() {
        let remote = Remote::connect(&VolumeRef::default_registry(), conn.insecure)?;
        let names = match &namespace {
            None => rt.block_on(inspect::namespaces(&remote))?,
            Some(ns) => rt
                .block_on(inspect::volumes(&remote, ns))?
                .into_iter()
                .map(|r| format!("bdn:{r}"))
                .collect(),
        };
        if let (Some(ns), true) = (&namespace, names.is_empty()) {
            bail!(
                "bdn:{ns}: no such namespace (no volumes on {})",
                remote.registry()
            );
        }
        match output {
            Output::Json => print_json(&names)?,
            Output::Text => names.iter().for_each(|n| println!("{n}")),
        }
        return Ok(());
    }
    let target = target.expect("checked above");
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let opened = rt.block_on(inspect::open(&remote, &vref))?;
    let entries = inspect::list(&opened, vref.path.as_deref(), recursive)?;
    match output {
        Output::Json => print_json(&entries)?,
        Output::Text => print_entries(&entries),
    }
    Ok(())
}

pub fn stat(
    target: &str,
    full_ref: bool,
    oci_ref: bool,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let opened = runtime()?.block_on(inspect::open(&remote, &vref))?;
    let s = inspect::stat(&remote, &opened, vref.path.as_deref())?;
    if full_ref && output == Output::Text {
        println!("{}", s.reference);
        return Ok(());
    }
    if oci_ref && output == Output::Text {
        println!("{}", s.oci_ref);
        return Ok(());
    }
    match output {
        Output::Json => print_json(&s)?,
        Output::Text => {
            println!("ref:      {}", s.reference);
            println!("index:    {}", s.index_digest);
            println!("oci:      {}", s.oci_ref);
            if let Some(c) = &s.created {
                println!("created:  {c}");
            }
            println!(
                "content:  {} files, {} dirs, {} symlinks, {}",
                s.stats.files,
                s.stats.dirs,
                s.stats.symlinks,
                human(s.stats.bytes)
            );
            println!(
                "chunks:   {} ({} distinct, {})",
                s.stats.chunks,
                s.stats.unique_chunks,
                human(s.stats.unique_bytes)
            );
            if let Some(src) = &s.source {
                println!("source:   {src}");
            }
            if let Some(e) = &s.entry {
                println!("path:     {}", e.path);
                println!("kind:     {}", e.kind);
                println!("mode:     {}", e.mode);
                println!("size:     {}", e.size);
                if let Some(b) = &e.blake3 {
                    println!("blake3:   {b}");
                }
                if let Some(t) = &e.target {
                    println!("target:   {t}");
                }
            }
        }
    }
    Ok(())
}

pub fn cat(
    target: &str,
    jobs: usize,
    cache: CacheDir,
    verification: Verification,
    conn: &Conn,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let Some(path) = vref.path.clone() else {
        bail!(
            "{target}: name a file inside the version, e.g. {}/config.json",
            vref
        );
    };
    let remote = connect(&vref, conn)?;
    // A cache that cannot be used only makes the read slower.
    let cache = cache.chunks().ok().flatten();
    let rt = runtime()?;
    let opened = rt.block_on(inspect::open(&remote, &vref))?;
    let shown = display_ref(&remote, &opened.version.pinned.without_path());
    if !check_legacy(&opened.tree, verification.legacy(), &shown)? {
        eprintln!("sealvol: {}", legacy_warning(&shown));
    }
    let keys = verification.trusted_keys()?;
    if !keys.is_empty() {
        rt.block_on(sealvol_client::signature::require(
            &remote,
            &opened.version,
            &opened.tree,
            &keys,
        ))?;
    }
    let mut out = std::io::stdout().lock();
    let jobs = if jobs == 0 { 4 } else { jobs };
    rt.block_on(inspect::cat(
        &remote,
        &opened,
        &path,
        jobs,
        cache.as_ref(),
        &mut out,
    ))?;
    Ok(())
}

/// One line per version: ref, created, size, files, then (with
/// `--include-tombstoned`) the lifecycle and when it was deleted, then
/// head and tags.
pub fn versions(
    target: &str,
    jobs: usize,
    include_tombstoned: bool,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let jobs = if jobs == 0 { 8 } else { jobs };
    let list = runtime()?.block_on(inspect::versions(&remote, &vref, jobs, include_tombstoned))?;
    match output {
        Output::Json => print_json(&list)?,
        Output::Text => {
            for v in &list {
                let mut tags = v.tags.clone();
                if v.is_head {
                    tags.insert(0, "head".into());
                }
                let lifecycle = if include_tombstoned {
                    format!(
                        "{:<10}  {:<20}  ",
                        v.lifecycle
                            .map(|l| l.to_string())
                            .unwrap_or_else(|| "-".into()),
                        v.tombstoned_at.as_deref().unwrap_or("-")
                    )
                } else {
                    String::new()
                };
                println!(
                    "{}  {}  {:>10}  {:>6} files  {lifecycle}{}",
                    v.reference,
                    v.created.as_deref().unwrap_or("-"),
                    v.size.map(human).unwrap_or_else(|| "-".into()),
                    v.files.map(|f| f.to_string()).unwrap_or_else(|| "-".into()),
                    tags.join(",")
                );
            }
        }
    }
    Ok(())
}

pub fn tag_set(
    target: &str,
    tag: &str,
    expires_at: Option<&str>,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let expires_at = expires_at
        .map(|s| crate::expiry::parse_expiry(s, std::time::SystemTime::now()))
        .transpose()?;
    let remote = connect(&vref, conn)?;
    let done = runtime()?.block_on(inspect::tag_set(&remote, &vref, tag, expires_at))?;
    match output {
        Output::Json => print_json(&done)?,
        Output::Text => match &done.expires_at {
            Some(t) => println!("{} -> {} (expires at {t})", done.tag, done.reference),
            None => println!("{} -> {}", done.tag, done.reference),
        },
    }
    Ok(())
}

pub fn tag_delete(target: &str, conn: &Conn, output: Output) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let sealvol_spec::reference::Selector::Tag(tag) = &vref.selector else {
        bail!("{target}: name the tag to delete, e.g. bdn:ns/vol:prod");
    };
    let remote = connect(&vref, conn)?;
    runtime()?.block_on(inspect::tag_delete(&remote, &vref, tag.as_str()))?;
    match output {
        Output::Json => print_json(&serde_json::json!({ "deleted": tag.as_str() }))?,
        Output::Text => eprintln!("deleted tag {}", tag.as_str()),
    }
    Ok(())
}

pub fn diff(a: &str, b: &str, conn: &Conn, output: Output) -> anyhow::Result<()> {
    let (ra, rb) = (parse_ref(a)?, parse_ref(b)?);
    let (ma, mb) = (connect(&ra, conn)?, connect(&rb, conn)?);
    let rt = runtime()?;
    let (oa, ob) = rt.block_on(async {
        futures_util::try_join!(inspect::open(&ma, &ra), inspect::open(&mb, &rb))
    })?;
    let d = inspect::diff(
        sealvol_client::resolve::display_ref(&ma, &oa.version.pinned),
        &oa.tree,
        sealvol_client::resolve::display_ref(&mb, &ob.version.pinned),
        &ob.tree,
    );
    match output {
        Output::Json => print_json(&d)?,
        Output::Text => {
            let mut out = std::io::stdout().lock();
            for e in &d.added {
                writeln!(out, "+ {}", e.path)?;
            }
            for e in &d.removed {
                writeln!(out, "- {}", e.path)?;
            }
            for c in &d.changed {
                writeln!(
                    out,
                    "M {} ({} -> {})",
                    c.path,
                    human(c.from.size),
                    human(c.to.size)
                )?;
            }
            writeln!(
                out,
                "{} added ({}), {} removed ({}), {} changed, {} files unchanged; {:.1}% of the chunk bytes shared, {} new",
                d.added.len(),
                human(d.bytes_added),
                d.removed.len(),
                human(d.bytes_removed),
                d.changed.len(),
                d.unchanged_files,
                d.shared_chunk_fraction * 100.0,
                human(d.new_chunk_bytes)
            )?;
        }
    }
    Ok(())
}

/// One line typed on the terminal after `prompt`, with echo off so that
/// nobody reads it over the user's shoulder; the line ending is kept.
pub(crate) fn read_hidden_line(prompt: &str) -> std::io::Result<String> {
    eprint!("{prompt}");
    let mut line = String::new();
    // SAFETY: tcgetattr/tcsetattr on stdin with a zeroed, then filled,
    // termios; echo is restored before returning.
    let saved = unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        libc::tcgetattr(0, &mut t);
        let saved = t;
        t.c_lflag &= !libc::ECHO;
        libc::tcsetattr(0, libc::TCSANOW, &t);
        saved
    };
    let r = std::io::stdin().lock().read_line(&mut line);
    // SAFETY: restores the attributes read above.
    unsafe { libc::tcsetattr(0, libc::TCSANOW, &saved) };
    eprintln!();
    r.map(|_| line)
}

/// Reads a password from standard input: the whole first line, with echo
/// off when it is a terminal.
fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    if !terminal && !from_stdin {
        bail!("no terminal to ask for a password on; pipe it in with --password-stdin");
    }
    let line = if terminal {
        read_hidden_line("Password: ")?
    } else {
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        line
    };
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        bail!("empty password");
    }
    Ok(password)
}

pub fn login(
    registry: Option<String>,
    username: Option<String>,
    password_stdin: bool,
    conn: &Conn,
) -> anyhow::Result<()> {
    let registry = registry.unwrap_or_else(VolumeRef::default_registry);
    let Some(username) = username else {
        bail!("give the user name with --username");
    };
    let password = read_password(password_stdin)?;
    let remote = Remote::with_login(&registry, conn.insecure, &username, &password)?;
    runtime()?.block_on(remote.check_login())?;
    let path = sealvol_client::credentials::store(&registry, &username, &password)?;
    eprintln!(
        "logged in to {registry}; credentials saved in {}",
        path.display()
    );
    Ok(())
}
