//! `sealvol sign`, `sealvol signatures` and `sealvol verify --signed-by`:
//! argument shapes and printing; the work is in
//! `sealvol_client::signature`.

use std::path::PathBuf;

use sealvol_client::resolve::{display_ref, load_tree, resolve};
use sealvol_client::signature::{self, Found, Kind, SigningKey};

use crate::output::Output;
use crate::volume::{connect, parse_ref, print_json, runtime, trusted_keys, Conn};

pub fn sign(
    target: &str,
    key: &str,
    cosign: bool,
    conn: &Conn,
    output: Output,
) -> anyhow::Result<()> {
    // The key first: a bad key fails before any registry call.
    let key = SigningKey::load(key)?;
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let rt = runtime()?;
    let (version, tree) = rt.block_on(async {
        let version = resolve(&remote, &vref.without_path()).await?;
        let tree = load_tree(&remote, &version).await?;
        Ok::<_, sealvol_client::Error>((version, tree))
    })?;
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let signed = rt.block_on(signature::sign(
        &remote, &version, &tree, &key, cosign, &created,
    ))?;
    let shown = display_ref(&remote, &version.pinned.without_path());
    match output {
        Output::Json => print_json(&serde_json::json!({
            "ref": shown,
            "signed": signed,
        }))?,
        Output::Text => {
            println!(
                "signed {shown} ({} files) with {} ({})",
                signed.files,
                signed.fingerprint,
                key.public().algorithm
            );
            for (m, what) in signed.manifests.iter().zip(["oms", "cosign"]) {
                println!("  {what:<7}{m}");
            }
        }
    }
    Ok(())
}

pub fn list(target: &str, keys: &[PathBuf], conn: &Conn, output: Output) -> anyhow::Result<()> {
    let keys = trusted_keys(keys)?;
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let found = runtime()?.block_on(async {
        let version = resolve(&remote, &vref.without_path()).await?;
        let tree = load_tree(&remote, &version).await?;
        signature::signatures(&remote, &version, &tree, &keys).await
    })?;
    match output {
        Output::Json => print_json(&found)?,
        Output::Text if found.is_empty() => println!("no signatures"),
        Output::Text => {
            println!("{:<7} {:<20} {:<50} VERIFIES", "KIND", "CREATED", "SIGNER");
            for f in &found {
                println!(
                    "{:<7} {:<20} {:<50} {}",
                    kind(f.kind),
                    if f.created.is_empty() {
                        "-"
                    } else {
                        &f.created
                    },
                    signer(f),
                    verdict(f)
                );
            }
        }
    }
    Ok(())
}

pub fn verify(target: &str, keys: &[PathBuf], conn: &Conn, output: Output) -> anyhow::Result<()> {
    let keys = trusted_keys(keys)?;
    let vref = parse_ref(target)?;
    let remote = connect(&vref, conn)?;
    let (shown, found) = runtime()?.block_on(async {
        let version = resolve(&remote, &vref.without_path()).await?;
        let tree = load_tree(&remote, &version).await?;
        let found = signature::require(&remote, &version, &tree, &keys).await?;
        let shown = display_ref(&remote, &version.pinned.without_path());
        Ok::<_, sealvol_client::Error>((shown, found))
    })?;
    match output {
        Output::Json => print_json(&serde_json::json!({"ref": shown, "signature": found}))?,
        Output::Text => {
            let what = match (found.kind, found.files) {
                (Kind::Oms, Some(n)) => format!("{n} files"),
                _ => "the version index".into(),
            };
            println!(
                "{shown}: signed by {} ({}), {what}",
                found.key.as_deref().unwrap_or("?"),
                found.signer.as_deref().unwrap_or("?")
            );
            if !found.ignored.is_empty() {
                eprintln!(
                    "sealvol: {} files are not covered (the signer ignored them): {}",
                    found.ignored.len(),
                    found.ignored.join(", ")
                );
            }
        }
    }
    Ok(())
}

fn kind(k: Kind) -> &'static str {
    match k {
        Kind::Oms => "oms",
        Kind::Cosign => "cosign",
        Kind::Other => "other",
    }
}

fn signer(f: &Found) -> String {
    match (&f.signer, &f.key) {
        (Some(fp), Some(k)) => format!("{fp} ({k})"),
        (Some(fp), None) => fp.clone(),
        _ if f.hint.is_empty() => "-".into(),
        _ => format!("hint {}", f.hint),
    }
}

fn verdict(f: &Found) -> String {
    match (&f.verified, &f.problem) {
        (true, _) => "yes".into(),
        (false, Some(p)) => format!("no: {p}"),
        (false, None) => "no".into(),
    }
}
