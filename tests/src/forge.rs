//! A hostile mirror: plain OCI distribution requests (no sealvol client
//! code) that read a version from a registry, change its tree index and
//! publish the result under the version's own digest tag, as a registry or
//! mirror that wanted to serve other bytes could. Also raw encoders of the
//! tree index (SPEC.md §2.4, and format 1 of §2.6) that keep whatever they
//! are given, so a test can write trees `TreeIndex::new` would refuse.

use std::path::Path;
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::StatusCode;
use sealvol_spec::oci::{
    self, BuiltVersion, VersionIndex, VersionMeta, ANN_CREATED, ANN_SOURCE, MT_TREE_BLOB,
    MT_TREE_MANIFEST,
};
use sealvol_spec::tree::encode_entries;
use sealvol_spec::{B3Digest, ChunkRef, Entry, EntryData, TreeFormat, TreeIndex};

const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// A version as a mirror reads it: its index, tree manifest and tree blob.
pub struct Fetched {
    /// `sha256:<hex>` of the index bytes.
    pub index_digest: String,
    pub index_bytes: Vec<u8>,
    pub index: VersionIndex,
    /// Creation time and source from the index annotations.
    pub meta: VersionMeta,
    /// The media type of the tree blob (format 1 or 2).
    pub tree_media_type: String,
    pub tree_blob: Vec<u8>,
    pub tree: TreeIndex,
}

/// A registry spoken to over plain HTTP with nothing but the distribution
/// API. Blocking: not for use inside an async runtime.
pub struct Mirror {
    base: String,
    client: Client,
}

impl Mirror {
    /// The registry at `addr` (`HOST:PORT`).
    pub fn new(addr: &str) -> Mirror {
        Mirror {
            base: format!("http://{addr}"),
            client: Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("build an HTTP client"),
        }
    }

    /// The manifest `reference` (a tag or digest) of `repo`: its bytes and
    /// `sha256:<hex>`; None when the registry has none.
    pub fn manifest(&self, repo: &str, reference: &str) -> Option<(Vec<u8>, String)> {
        let r = self
            .client
            .get(format!("{}/v2/{repo}/manifests/{reference}", self.base))
            .header("accept", format!("{INDEX_TYPE}, {MANIFEST_TYPE}"))
            .send()
            .unwrap_or_else(|e| panic!("GET manifest {repo}:{reference}: {e}"));
        if r.status() == StatusCode::NOT_FOUND {
            return None;
        }
        assert!(
            r.status().is_success(),
            "GET manifest {repo}:{reference}: {}",
            r.status()
        );
        let bytes = r.bytes().expect("manifest body").to_vec();
        let digest = crate::sha256(&bytes);
        Some((bytes, digest))
    }

    /// The `sha256:<hex>` of the manifest `reference` of `repo`.
    pub fn manifest_digest(&self, repo: &str, reference: &str) -> Option<String> {
        self.manifest(repo, reference).map(|(_, d)| d)
    }

    /// The bytes of blob `digest` of `repo`.
    pub fn blob(&self, repo: &str, digest: &str) -> Vec<u8> {
        let r = self
            .client
            .get(format!("{}/v2/{repo}/blobs/{digest}", self.base))
            .send()
            .unwrap_or_else(|e| panic!("GET blob {digest}: {e}"));
        assert!(r.status().is_success(), "GET blob {digest}: {}", r.status());
        let bytes = r.bytes().expect("blob body").to_vec();
        assert_eq!(
            crate::sha256(&bytes),
            digest,
            "blob {digest} has other bytes"
        );
        bytes
    }

    /// Whether `HEAD` of blob `digest` of `repo` answers 200.
    pub fn has_blob(&self, repo: &str, digest: &str) -> bool {
        let r = self
            .client
            .head(format!("{}/v2/{repo}/blobs/{digest}", self.base))
            .send()
            .unwrap_or_else(|e| panic!("HEAD blob {digest}: {e}"));
        r.status().is_success()
    }

    /// Uploads `bytes` to `repo` (POST, then PUT `?digest=`) unless it is
    /// there already; returns its `sha256:<hex>`.
    pub fn put_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = crate::sha256(bytes);
        if self.has_blob(repo, &digest) {
            return digest;
        }
        let r = self
            .client
            .post(format!("{}/v2/{repo}/blobs/uploads/", self.base))
            .send()
            .unwrap_or_else(|e| panic!("POST upload: {e}"));
        assert_eq!(r.status(), StatusCode::ACCEPTED, "POST upload to {repo}");
        let location = r.headers()["location"]
            .to_str()
            .expect("ASCII Location")
            .to_string();
        let url = if location.starts_with('/') {
            format!("{}{location}", self.base)
        } else {
            location
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let r = self
            .client
            .put(format!("{url}{sep}digest={digest}"))
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .unwrap_or_else(|e| panic!("PUT blob {digest}: {e}"));
        assert_eq!(
            r.status(),
            StatusCode::CREATED,
            "PUT blob {digest}: {}",
            r.text().unwrap_or_default()
        );
        digest
    }

    /// Stores a manifest under `reference` (a tag, or its digest).
    pub fn put_manifest(&self, repo: &str, reference: &str, bytes: &[u8], media_type: &str) {
        let r = self
            .client
            .put(format!("{}/v2/{repo}/manifests/{reference}", self.base))
            .header("content-type", media_type)
            .body(bytes.to_vec())
            .send()
            .unwrap_or_else(|e| panic!("PUT manifest {repo}:{reference}: {e}"));
        assert!(
            r.status().is_success(),
            "PUT manifest {repo}:{reference}: {}: {}",
            r.status(),
            r.text().unwrap_or_default()
        );
    }

    /// The version tagged `b3-<hex>` in `repo`.
    pub fn fetch(&self, repo: &str, hex: &str) -> Fetched {
        self.fetch_ref(repo, &format!("b3-{hex}"))
    }

    /// The version the manifest `reference` of `repo` is.
    pub fn fetch_ref(&self, repo: &str, reference: &str) -> Fetched {
        let (index_bytes, index_digest) = self
            .manifest(repo, reference)
            .unwrap_or_else(|| panic!("{repo} has no manifest {reference}"));
        let index = VersionIndex::parse(&index_bytes)
            .unwrap_or_else(|e| panic!("{repo}:{reference} is not a version index: {e}"));
        let tree_manifest = index.tree_manifest.digest().to_string();
        let (m, _) = self
            .manifest(repo, &tree_manifest)
            .unwrap_or_else(|| panic!("{repo} lacks the tree manifest {tree_manifest}"));
        let layers = oci::artifact_layers(&m, MT_TREE_MANIFEST).expect("a tree manifest");
        let layer = layers.first().expect("the tree manifest has a layer");
        let tree_blob = self.blob(repo, layer.digest().as_ref());
        let tree = TreeIndex::decode(&tree_blob).expect("the published tree decodes");
        let ann: serde_json::Value = serde_json::from_slice(&index_bytes).unwrap();
        let meta = VersionMeta {
            created: ann["annotations"][ANN_CREATED]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            source: ann["annotations"][ANN_SOURCE].as_str().map(str::to_string),
        };
        Fetched {
            index_digest,
            index_bytes,
            index,
            meta,
            tree_media_type: layer.media_type().to_string(),
            tree_blob,
            tree,
        }
    }

    /// Stores `built` in `repo` as a writer does (SPEC.md §5.7): its
    /// blobs, manifests, the index by digest, then each of `tags`. The
    /// chunk blobs must be there already.
    pub fn publish(&self, repo: &str, built: &BuiltVersion, tags: &[&str]) -> String {
        for b in &built.blobs {
            self.put_blob(repo, &b.bytes);
        }
        for m in &built.manifests {
            let digest = m.digest().to_string();
            self.put_manifest(repo, &digest, &m.bytes, MANIFEST_TYPE);
        }
        let index = built.index.digest().to_string();
        self.put_manifest(repo, &index, &built.index.bytes, INDEX_TYPE);
        for t in tags {
            self.put_manifest(repo, t, &built.index.bytes, INDEX_TYPE);
        }
        index
    }

    /// Seals `dir` with `params` and publishes it to `repo` under its
    /// digest tag and `head`, as a release cutting with those parameters
    /// would have (SPEC.md §4.1: a volume keeps its head's chunking).
    pub fn publish_dir(
        &self,
        repo: &str,
        dir: &Path,
        params: sealvol_spec::ChunkingParams,
    ) -> sealvol_client::Sealed {
        let sealed = sealvol_client::seal(
            dir,
            &sealvol_client::SealOptions {
                params,
                cache_dir: sealvol_client::CacheDir::Off,
                ..Default::default()
            },
        )
        .expect("seal the folder");
        self.put_chunks_from(repo, &sealed.tree, dir);
        let built = oci::build_version(
            &sealed.tree,
            &VersionMeta {
                created: "2026-06-01T00:00:00Z".into(),
                source: None,
            },
        )
        .expect("lay the version out");
        let digest_tag = sealvol_spec::reference::Tag::for_digest(&sealed.digest);
        self.publish(repo, &built, &[digest_tag.as_str(), "head"]);
        sealed
    }

    /// Uploads to `repo` every chunk `tree` names, read from the files
    /// under `dir` that the tree was sealed from.
    pub fn put_chunks_from(&self, repo: &str, tree: &TreeIndex, dir: &Path) {
        for e in tree.entries() {
            if let EntryData::File { chunks, .. } = &e.data {
                let data = std::fs::read(dir.join(&e.path)).expect("read a source file");
                for c in chunks {
                    let bytes = &data[c.offset as usize..c.offset as usize + c.length as usize];
                    let d = self.put_blob(repo, bytes);
                    assert_eq!(d, c.sha256.to_string(), "{} changed since the push", e.path);
                }
            }
        }
    }

    /// Forges the version `b3-<hex>` of `repo`: its entries as `mutate`
    /// leaves them, as a *valid* format 2 tree (`TreeIndex::new` checks the
    /// chain, so file hashes and pieces must still agree), laid out anew
    /// and published under `b3-<hex>` and `head`. Returns the layout.
    pub fn forge(
        &self,
        repo: &str,
        hex: &str,
        mutate: impl FnOnce(&mut Vec<Entry>),
    ) -> BuiltVersion {
        let f = self.fetch(repo, hex);
        let mut entries = f.tree.entries().to_vec();
        mutate(&mut entries);
        let forged = TreeIndex::new(f.tree.params(), entries)
            .unwrap_or_else(|e| panic!("the forged tree is not a valid tree: {e}"));
        let built = oci::build_version(&forged, &f.meta).expect("lay out the forged tree");
        self.publish(repo, &built, &[&format!("b3-{hex}"), "head"]);
        built
    }

    /// Forges the version `b3-<hex>` of `repo` with a tree blob encoded
    /// by hand ([`encode_entries`], format 2) from the entries as `mutate`
    /// leaves them, valid or not. The layout around it (index annotation,
    /// view layer, shards) is the original tree's, so the index still
    /// claims the version digest `b3:<hex>`. Published under `b3-<hex>`
    /// and `head`.
    pub fn forge_raw(
        &self,
        repo: &str,
        hex: &str,
        mutate: impl FnOnce(&mut Vec<Entry>),
    ) -> BuiltVersion {
        let f = self.fetch(repo, hex);
        self.forge_raw_on(repo, &f, mutate)
    }

    /// [`Mirror::forge_raw`] starting from `base`, a version fetched before
    /// (the mirror may have forged it since, into a tree that no longer
    /// decodes).
    pub fn forge_raw_on(
        &self,
        repo: &str,
        base: &Fetched,
        mutate: impl FnOnce(&mut Vec<Entry>),
    ) -> BuiltVersion {
        let mut entries = base.tree.entries().to_vec();
        mutate(&mut entries);
        let blob = encode_entries(TreeFormat::V2, base.tree.params(), &entries, &|_, _| {
            unreachable!("format 2 has no per-chunk BLAKE3")
        });
        let built = oci::build_version_with_blob(&base.tree, blob, MT_TREE_BLOB, &base.meta)
            .expect("lay out the forged tree");
        let hex = base.index.digest.hex();
        assert_eq!(
            built.digest, base.index.digest,
            "the layout claims the pinned digest"
        );
        self.publish(repo, &built, &[&format!("b3-{hex}"), "head"]);
        built
    }
}

impl Mirror {
    /// Publishes `entries` (in the order given, valid or not) to `repo` as
    /// a self-consistent version: the tree encoded by hand (format 2), the
    /// index claiming the digest of those very entries, so the trust chain
    /// has nothing to catch; `chunks` (the bytes of every chunk the entries
    /// name) uploaded first. Tagged `b3-<hex>`, `head` and `tags`; returns
    /// the digest's hex.
    pub fn publish_entries(
        &self,
        repo: &str,
        params: sealvol_spec::ChunkingParams,
        entries: &[Entry],
        chunks: &[&[u8]],
        tags: &[&str],
    ) -> String {
        for c in chunks {
            self.put_blob(repo, c);
        }
        let blob = encode_entries(TreeFormat::V2, params, entries, &|_, _| {
            unreachable!("format 2 has no per-chunk BLAKE3")
        });
        let meta = VersionMeta {
            created: "2026-12-06T00:00:00Z".into(),
            source: None,
        };
        let built = oci::build_layout(entries, blob, MT_TREE_BLOB, &meta)
            .expect("lay out the hostile tree");
        let hex = built.digest.hex();
        let mut all = vec![format!("b3-{hex}"), "head".to_string()];
        all.extend(tags.iter().map(|t| t.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        self.publish(repo, &built, &all);
        hex
    }
}

/// `tree` re-encoded as format 1, as the previous release wrote it: each
/// chunk record with the BLAKE3 of the chunk's bytes, read from the files
/// under `dir` the tree was sealed from.
pub fn encode_v1_from(tree: &TreeIndex, dir: &Path) -> Vec<u8> {
    let files: std::collections::HashMap<String, Vec<u8>> = tree
        .entries()
        .iter()
        .filter(|e| matches!(e.data, EntryData::File { .. }))
        .map(|e| {
            let data = std::fs::read(dir.join(&e.path)).expect("read a source file");
            (e.path.clone(), data)
        })
        .collect();
    encode_entries(TreeFormat::V1, tree.params(), tree.entries(), &|e, c| {
        let data = &files[&e.path];
        B3Digest::of(&data[c.offset as usize..c.offset as usize + c.length as usize])
    })
}

/// The chunk list of the file at `path` of `tree`.
pub fn chunks_of(tree: &TreeIndex, path: &str) -> Vec<ChunkRef> {
    match &tree.get(path).unwrap_or_else(|| panic!("no {path}")).data {
        EntryData::File { chunks, .. } => chunks.clone(),
        other => panic!("{path} is not a file: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TreeIndex {
        let big: Vec<u8> = (0..(3u32 << 20) + 77)
            .map(|i| ((i * 7) >> 3) as u8)
            .collect();
        TreeIndex::new(
            sealvol_spec::ChunkingParams::default(),
            vec![
                Entry {
                    path: "a".into(),
                    mode: 0o755,
                    data: EntryData::Dir,
                },
                Entry {
                    path: "a/big".into(),
                    mode: 0o644,
                    data: EntryData::file_of(&big, &[1 << 20, (1 << 20) + 5, 1 << 20, 72]),
                },
                Entry {
                    path: "a/small".into(),
                    mode: 0o600,
                    data: EntryData::file_of(b"hello", &[]),
                },
                Entry {
                    path: "link".into(),
                    mode: 0o777,
                    data: EntryData::Symlink {
                        target: "a/small".into(),
                    },
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_raw_format_2_encoder_writes_what_the_spec_crate_writes() {
        let t = sample();
        let raw = encode_entries(
            TreeFormat::V2,
            t.params(),
            t.entries(),
            &|_, _| unreachable!(),
        );
        assert_eq!(raw, t.encode().unwrap());
    }

    #[test]
    fn the_format_1_encoding_decodes_as_format_1_with_the_same_digest() {
        let t = sample();
        let raw = encode_entries(TreeFormat::V1, t.params(), t.entries(), &|_, _| {
            B3Digest([9; 32])
        });
        let v1 = TreeIndex::decode(&raw).unwrap();
        assert_eq!(v1.format(), sealvol_spec::TreeFormat::V1);
        assert_eq!(v1.version_digest(), t.version_digest());
        assert!(!v1.is_verifiable());
    }
}
