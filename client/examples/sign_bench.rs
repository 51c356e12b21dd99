//! Helper for `bench/signatures`: publishes a synthetic version of many
//! large files whose bytes are never read, to time signing and checking
//! a signature from the tree alone.
//!
//! ```text
//! cargo run --release -p sealvol-client --example sign_bench -- publish HOST/ns/vol FILES FILE_MIB
//! ```
//!
//! Every file holds `FILE_MIB` MiB of zeros, cut at the maximum chunk size
//! as FastCDC cuts zeros, so the version declares `FILES × FILE_MIB` MiB
//! while the registry stores one or two chunk blobs. Prints the version's
//! ref.

use std::process::ExitCode;

use bytes::Bytes;
use sealvol_spec::oci::{build_version, VersionMeta};
use sealvol_spec::tree::{Entry, EntryData};
use sealvol_spec::{ChunkingParams, TreeIndex, VolumeRef};

const MIB: usize = 1 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, target, files, mib] if cmd == "publish" => {
            let (Ok(files), Ok(mib)) = (files.parse::<usize>(), mib.parse::<usize>()) else {
                eprintln!("FILES and FILE_MIB are numbers");
                return ExitCode::from(2);
            };
            match publish(target, files, mib) {
                Ok(r) => {
                    println!("{r}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sign_bench: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!("usage: sign_bench publish HOST/ns/vol FILES FILE_MIB");
            ExitCode::from(2)
        }
    }
}

fn publish(target: &str, files: usize, mib: usize) -> Result<String, Box<dyn std::error::Error>> {
    let vref: VolumeRef = target.parse()?;
    let params = ChunkingParams::default();
    let data = vec![0u8; mib * MIB];
    let lengths: Vec<usize> = data.chunks(params.max as usize).map(|c| c.len()).collect();
    let one = EntryData::file_of(&data, &lengths);
    let EntryData::File { chunks, .. } = &one else {
        unreachable!()
    };
    let mut blobs: Vec<(sealvol_spec::Sha256Digest, Bytes)> = Vec::new();
    for c in chunks {
        if !blobs.iter().any(|(d, _)| *d == c.sha256) {
            let range = c.offset as usize..c.offset as usize + c.length as usize;
            blobs.push((c.sha256, Bytes::copy_from_slice(&data[range])));
        }
    }
    drop(data);
    // A thousand files to a directory, as sharded datasets lay them out.
    let mut entries = Vec::with_capacity(files + files / 1000 + 1);
    for i in 0..files {
        if i % 1000 == 0 {
            entries.push(Entry {
                path: format!("part-{:04}", i / 1000),
                mode: 0o755,
                data: EntryData::Dir,
            });
        }
        entries.push(Entry {
            path: format!("part-{:04}/file-{i:06}.bin", i / 1000),
            mode: 0o644,
            data: one.clone(),
        });
    }
    let tree = TreeIndex::new(params, entries)?;
    let meta = VersionMeta {
        created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        source: None,
    };
    let built = build_version(&tree, &meta)?;
    let registry = vref.registry_or(&VolumeRef::default_registry()).to_string();
    let repo = vref.repository();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let remote = sealvol_client::Remote::connect(&registry, false)?;
        remote.prepare(&repo, true).await;
        for (d, b) in &blobs {
            remote.put_blob(&repo, d, b.clone()).await?;
        }
        for c in &built.blobs {
            remote
                .put_blob(&repo, &c.digest(), Bytes::from(c.bytes.clone()))
                .await?;
        }
        for m in &built.manifests {
            remote
                .put_manifest(
                    &repo,
                    &m.digest().to_string(),
                    Bytes::from(m.bytes.clone()),
                    &m.descriptor.media_type().to_string(),
                )
                .await?;
        }
        let index = Bytes::from(built.index.bytes.clone());
        let media = "application/vnd.oci.image.index.v1+json";
        for reference in [
            built.index.digest().to_string(),
            format!("b3-{}", built.digest.hex()),
            "head".to_string(),
        ] {
            remote
                .put_manifest(&repo, &reference, index.clone(), media)
                .await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(format!("{registry}/{repo}@{}", built.digest))
}
