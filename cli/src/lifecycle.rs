//! The commands that need the registry's volume API (SPEC.md §7): rm,
//! restore, update, gc. Each parses its ref, calls
//! `sealvol_client::volumes` and prints text (or one JSON document with
//! `--output json`). Against a registry without the API each fails with
//! one line: "registry HOST does not support … (it has no sealvol volume
//! API)".

use std::io::{BufRead as _, IsTerminal as _};

use anyhow::bail;
use sealvol_client::inspect::VersionInfo;
use sealvol_client::resolve::display_ref;
use sealvol_client::volumes::{self, GcReport, Volume};
use sealvol_client::Remote;
use sealvol_spec::reference::{Selector, VolumeRef};
use serde::Serialize;

use crate::expiry::parse_expiry_or_never;
use crate::output::Output;
use crate::volume::{connect, human, parse_ref, print_json, runtime, Conn};

/// What `rm` prints with `--output json`:
///
/// ```json
/// {"deleted":[{"ref":"bdn:ns/vol@b3:<hex>","digest":"b3:<hex>","index_digest":"sha256:<hex>",
///              "created":"…","size":N,"files":N,"is_head":false,"tags":[],"sequence":N,
///              "lifecycle":"TOMBSTONED","tombstoned_at":"…","restorable_until":"…"}],
///  "retention_seconds":604800}
/// ```
#[derive(Serialize)]
struct Removed {
    deleted: Vec<VersionInfo>,
    retention_seconds: u64,
}

/// What `update` prints with `--output json`: the registry's Volume
/// record (SPEC.md §7.3) with the volume's ref first:
/// `{"ref":"bdn:ns/vol","name":"ns/vol","namespace":"ns","head":{…}|null,
/// "tags":[…],"alive":N,"tombstoned":N,"untagged":N,"sequence":N,
/// "updated_at":"…","expires_at":"…"|null}`.
#[derive(Serialize)]
struct VolumeOut {
    #[serde(rename = "ref")]
    reference: String,
    #[serde(flatten)]
    volume: Volume,
}

/// Asks `question` on the terminal unless `yes`; without a terminal to
/// ask on, only `--yes` deletes.
fn confirm(question: &str, yes: bool) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!("refusing to delete without confirmation: pass --yes");
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    if matches!(line.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        Ok(())
    } else {
        bail!("cancelled; nothing was deleted")
    }
}

/// `sealvol rm REF@digest` deletes one version (a prefix must match
/// exactly one alive version); `sealvol rm --recursive REF` deletes every
/// version of the volume. Deleted versions stay restorable for the
/// registry's retention.
pub fn rm(
    target: &str,
    recursive: bool,
    yes: bool,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let volume = vref.with_selector(Selector::Head);
    let shown_volume = display_ref(&remote, &volume);
    if vref.path.is_some() {
        bail!(
            "{target}: rm deletes versions, not paths inside one; give {shown_volume}@b3:<digest>"
        );
    }
    let digest = match (&vref.selector, recursive) {
        (Selector::Head, false) => bail!(
            "{target}: name the version to delete ({shown_volume}@b3:<digest>) or pass --recursive to delete every version of the volume"
        ),
        (Selector::Tag(_), _) => bail!(
            "{target}: rm takes a version's digest, not a tag; `sealvol stat {target} --full-ref` prints it, `sealvol tag delete {target}` removes only the tag"
        ),
        (Selector::Digest(_), true) => bail!(
            "{target}: --recursive deletes every version of a volume; give {shown_volume} without a digest"
        ),
        (Selector::Digest(d), false) => Some(d.clone()),
        (Selector::Head, true) => None,
    };
    let rt = runtime()?;
    let info = rt.block_on(sealvol_client::api::require(&remote, "deleting versions"))?;
    // A script learns it needs --yes before anything is looked up.
    if !yes && !std::io::stdin().is_terminal() {
        bail!("refusing to delete without confirmation: pass --yes");
    }
    let deleted = match digest {
        Some(d) => {
            let full = rt.block_on(volumes::resolve_digest(&remote, &volume, &d, false))?;
            let shown = display_ref(
                &remote,
                &volume.with_selector(Selector::Digest(full.clone())),
            );
            confirm(&format!("Delete {shown}?"), yes)?;
            vec![rt.block_on(volumes::delete_version(&remote, &volume, &full))?]
        }
        None => {
            let record = rt.block_on(volumes::volume(&remote, &volume))?;
            if record.alive == 0 {
                eprintln!("{shown_volume} has no versions left to delete");
                Vec::new()
            } else {
                let n = record.alive;
                let versions = if n == 1 { "version" } else { "versions" };
                confirm(
                    &format!("Delete all {n} {versions} of {shown_volume}?"),
                    yes,
                )?;
                rt.block_on(volumes::delete_volume(&remote, &volume))?
            }
        }
    };
    let deleted: Vec<VersionInfo> = deleted
        .into_iter()
        .map(|v| VersionInfo::from_api(&remote, &volume, v))
        .collect();
    let within = sealvol_client::api::human_seconds(info.retention_seconds);
    match output {
        Output::Json => print_json(&Removed {
            deleted,
            retention_seconds: info.retention_seconds,
        })?,
        Output::Text => {
            for v in &deleted {
                println!("deleted {}", v.reference);
            }
            match deleted.as_slice() {
                [] => {}
                [one] => eprintln!(
                    "restore with `sealvol restore {}` within {within}",
                    one.reference
                ),
                _ => eprintln!(
                    "restore any of them with `sealvol restore {shown_volume}@b3:<digest>` within {within}"
                ),
            }
        }
    }
    Ok(())
}

/// `sealvol restore REF@<full digest>`: brings a deleted version back.
pub fn restore(target: &str, conn: &Conn, output: Output) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let volume = vref.with_selector(Selector::Head);
    let shown_volume = display_ref(&remote, &volume);
    let Selector::Digest(digest) = &vref.selector else {
        bail!(
            "{target}: name the deleted version by its full digest, {shown_volume}@b3:<64 hex>; `sealvol versions {shown_volume} --include-tombstoned` lists them"
        );
    };
    if vref.path.is_some() {
        bail!("{target}: restore brings back a whole version; give it without a path");
    }
    let v = runtime()?.block_on(volumes::restore(&remote, &volume, digest))?;
    let v = VersionInfo::from_api(&remote, &volume, v);
    match output {
        Output::Json => print_json(&v)?,
        Output::Text => {
            println!("restored {}", v.reference);
            eprintln!(
                "{}tags it had are not restored; set them again with `sealvol tag set {} TAG`",
                if v.is_head { "it is head again; " } else { "" },
                v.reference
            );
        }
    }
    Ok(())
}

/// `sealvol update REF --expires-at TIME|never`.
pub fn update(target: &str, expires_at: &str, conn: &Conn, output: Output) -> anyhow::Result<()> {
    let vref = parse_ref(target)?;
    let at = parse_expiry_or_never(expires_at)?;
    let remote = connect(&vref, conn)?;
    let volume = vref.with_selector(Selector::Head);
    let shown = display_ref(&remote, &volume);
    if vref.selector != Selector::Head || vref.path.is_some() {
        bail!(
            "{target}: update changes a whole volume; give {shown} without a tag, digest or path"
        );
    }
    let record = runtime()?.block_on(volumes::update(&remote, &volume, at))?;
    match output {
        Output::Json => print_json(&VolumeOut {
            reference: shown,
            volume: record,
        })?,
        Output::Text => match &record.expires_at {
            Some(t) => println!("{shown} expires at {t}"),
            None => println!("{shown} never expires"),
        },
    }
    Ok(())
}

/// `sealvol gc [--dry-run] [--registry HOST]`. With `--output json` it
/// prints the registry's GcReport (SPEC.md §7.3) as it is:
/// `{"dry_run":bool,"versions_purged":N,"tags_expired":N,"volumes_expired":N,
/// "manifests_deleted":N,"links_removed":N,"blobs_deleted":N,
/// "bytes_reclaimed":N,"blobs_in_grace":N}`.
pub fn gc(
    dry_run: bool,
    registry: Option<String>,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    let registry = registry.unwrap_or_else(VolumeRef::default_registry);
    let remote = Remote::connect(&registry, conn.insecure)?;
    let report = runtime()?.block_on(volumes::gc(&remote, dry_run))?;
    match output {
        Output::Json => print_json(&report)?,
        Output::Text => print!("{}", gc_text(&registry, &report)),
    }
    Ok(())
}

fn gc_text(registry: &str, r: &GcReport) -> String {
    let mut out = if r.dry_run {
        format!("garbage collection on {registry} (dry run: nothing was deleted)\n")
    } else {
        format!("garbage collection on {registry}\n")
    };
    let rows = [
        ("versions purged", r.versions_purged.to_string()),
        ("tags expired", r.tags_expired.to_string()),
        ("volumes expired", r.volumes_expired.to_string()),
        ("manifests deleted", r.manifests_deleted.to_string()),
        ("links removed", r.links_removed.to_string()),
        ("blobs deleted", r.blobs_deleted.to_string()),
        (
            "bytes reclaimed",
            format!("{} ({} bytes)", human(r.bytes_reclaimed), r.bytes_reclaimed),
        ),
        ("blobs in grace", r.blobs_in_grace.to_string()),
    ];
    for (label, value) in rows {
        out.push_str(&format!("{:<18} {value}\n", format!("{label}:")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_report_text_is_one_row_per_count() {
        let r = GcReport {
            dry_run: true,
            blobs_deleted: 4,
            bytes_reclaimed: 3 << 20,
            ..Default::default()
        };
        let text = gc_text("127.0.0.1:5000", &r);
        assert!(text
            .starts_with("garbage collection on 127.0.0.1:5000 (dry run: nothing was deleted)\n"));
        assert!(text.contains("\nblobs deleted:     4\n"), "{text}");
        assert!(
            text.contains("\nbytes reclaimed:   3.0 MiB (3145728 bytes)\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 9);
    }
}
