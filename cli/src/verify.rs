//! `sealvol verify` and `sealvol upgrade`: argument shapes and printing;
//! the work is in `sealvol_client::verify` and `sealvol_client::upgrade`.

use std::path::{Path, PathBuf};

use anyhow::bail;
use sealvol_client::verify::{self, Problem};
use sealvol_client::CacheDir;
use sealvol_client::SealOptions;
use sealvol_spec::{B3Digest, VolumeRef};

use crate::output::Output;
use crate::progress;
use crate::volume::{connect, human, parse_ref, print_json, runtime, Conn};

#[allow(clippy::too_many_arguments)]
pub fn verify(
    first: &str,
    second: Option<&str>,
    digest: Option<&str>,
    deep: bool,
    jobs: usize,
    cache_dir: CacheDir,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let jobs = if jobs == 0 { 8 } else { jobs };
    let seal = SealOptions {
        cache_dir: cache_dir.clone(),
        ..SealOptions::default()
    };
    // A positional argument that parses as a ref is a ref.
    let as_ref = first.parse::<VolumeRef>().ok();
    let ok = match (as_ref, second, digest) {
        (Some(vref), None, None) => {
            let remote = connect(&vref, conn)?;
            let r = runtime()?.block_on(verify::verify_registry(&remote, &vref, deep, jobs))?;
            match output {
                Output::Json => print_json(&r)?,
                Output::Text => {
                    let how = if deep { "every byte" } else { "manifests and chunks" };
                    for p in &r.missing {
                        println!("missing {}", describe(p));
                    }
                    for p in &r.corrupt {
                        println!("corrupt {}", describe(p));
                    }
                    if r.ok {
                        println!("{}: ok ({} chunks; {how} checked)", r.reference, r.chunks);
                    } else {
                        println!(
                            "{}: NOT ok: {} missing, {} corrupt",
                            r.reference,
                            r.missing.len(),
                            r.corrupt.len()
                        );
                    }
                    if deep {
                        eprintln!("{} read and checked", human(r.bytes_checked));
                    }
                }
            }
            if !r.verifiable {
                eprintln!(
                    "sealvol: {}",
                    sealvol_client::resolve::legacy_warning(&r.reference)
                );
            }
            r.ok
        }
        (_, Some(r), None) => {
            if deep {
                bail!("--deep checks a registry's copy; `verify DIR REF` always compares every file");
            }
            let vref = parse_ref(r)?;
            let dir = directory(first)?;
            let remote = connect(&vref, conn)?;
            let r = runtime()?.block_on(verify::verify_dir(&remote, &vref, &dir, &seal))?;
            match output {
                Output::Json => print_json(&r)?,
                Output::Text => {
                    for d in &r.differences {
                        println!("{:<8} {}", d.what, d.path);
                    }
                    if r.ok {
                        println!("{}: matches {}", r.dir.display(), r.reference);
                    } else {
                        println!(
                            "{}: differs from {} ({} entries)",
                            r.dir.display(),
                            r.reference,
                            r.differences.len()
                        );
                    }
                }
            }
            r.ok
        }
        (_, None, Some(d)) => {
            let want: B3Digest = d
                .parse::<B3Digest>()
                .or_else(|_| format!("b3:{d}").parse::<B3Digest>())
                .map_err(|_| anyhow::anyhow!("--digest {d}: give a full version digest, b3:<64 hex>"))?;
            let dir = directory(first)?;
            let r = runtime()?.block_on(verify::verify_dir_digest(&dir, want, &seal))?;
            match output {
                Output::Json => print_json(&r)?,
                Output::Text if r.ok => println!("{}: matches {}", r.dir.display(), r.digest),
                Output::Text => println!(
                    "{}: mismatch: it seals to {}, not {}",
                    r.dir.display(),
                    r.actual,
                    r.digest
                ),
            }
            r.ok
        }
        (_, Some(_), Some(_)) => bail!("give either a REF or --digest to check {first} against, not both"),
        (None, None, None) => bail!(
            "{first} is not a ref; to check a directory, give the version: sealvol verify DIR REF, or sealvol verify DIR --digest b3:<hex>"
        ),
    };
    if !ok {
        // The report said what is wrong; the exit status says that it is.
        std::process::exit(1);
    }
    Ok(())
}

fn describe(p: &Problem) -> String {
    let what = match &p.path {
        Some(path) => format!("{} {} ({path})", p.kind, p.digest),
        None => format!("{} {}", p.kind, p.digest),
    };
    match &p.reason {
        Some(why) => format!("{what}: {why}"),
        None => what,
    }
}

fn directory(arg: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(arg);
    if !dir.is_dir() {
        bail!("{arg}: not a directory");
    }
    Ok(dir.to_path_buf())
}

pub fn upgrade(
    target: &str,
    jobs: usize,
    cache_dir: CacheDir,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    // A cache that cannot be used only makes the upgrade slower.
    let cache = cache_dir.chunks().ok().flatten();
    let jobs = if jobs == 0 { 8 } else { jobs };
    let progress = progress::for_terminal(output == Output::Json);
    let r = runtime()?.block_on(sealvol_client::upgrade::upgrade(
        &remote,
        &vref,
        jobs,
        cache.as_ref(),
        progress.as_ref(),
    ))?;
    match output {
        Output::Json => print_json(&r)?,
        Output::Text => {
            println!("{}", r.reference);
            if r.upgraded {
                eprintln!(
                    "re-published with a format 2 tree index ({}), {} files, {} read, in {:.2}s; tags moved: {}",
                    r.index_digest,
                    r.files,
                    human(r.bytes_read),
                    r.duration_seconds,
                    if r.tags.is_empty() { "none".into() } else { r.tags.join(", ") }
                );
            } else {
                eprintln!("already has a format 2 tree index; nothing to do");
            }
        }
    }
    Ok(())
}
