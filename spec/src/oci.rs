//! How a sealed version is laid out as plain OCI content (SPEC.md §5).
//!
//! A version is one OCI image index. Its entries are, in order: one *view*
//! image manifest per platform (a consistent image whose single layer is a
//! tiny tar naming the version, so containerd can pull it with a
//! snapshotter), the *tree* manifest (the tree index blob), and the *chunk
//! shard* manifests whose layers are the chunk blobs. Non-view entries carry
//! platform `unknown/unknown` so runtimes skip them, as BuildKit does for
//! attestations. Every blob is reachable from the index, so registry garbage
//! collection keeps it and `skopeo copy --all` copies it.

use std::collections::{HashMap, HashSet};

use oci_spec::image::{
    Arch, Descriptor, DescriptorBuilder, ImageConfigurationBuilder, ImageIndex, ImageIndexBuilder,
    ImageManifest, ImageManifestBuilder, MediaType, Os, Platform, PlatformBuilder, RootFsBuilder,
};
use serde::Serialize;

/// The OCI descriptor type the layout is made of, for readers of it.
pub use oci_spec::image::Descriptor as OciDescriptor;
use thiserror::Error;

use crate::digest::{B3Digest, Sha256Digest};
use crate::tree::{Entry, EntryData, TreeIndex};

/// `artifactType` of a version's top-level index.
pub const MT_VERSION: &str = "application/vnd.sealvol.version.v1";
/// `artifactType` of the manifest that holds the tree index blob.
pub const MT_TREE_MANIFEST: &str = "application/vnd.sealvol.tree.v1";
/// Media type of the tree index blob (SPEC.md §2.4 encoding).
pub const MT_TREE_BLOB: &str = "application/vnd.sealvol.tree.index.v2";
/// The tree index blob of format 1 (§2.6), which readers still accept.
pub const MT_TREE_BLOB_V1: &str = "application/vnd.sealvol.tree.index.v1";
/// `artifactType` of a chunk shard manifest.
pub const MT_CHUNKS_MANIFEST: &str = "application/vnd.sealvol.chunks.v1";
/// Media type of a chunk blob: the raw bytes of one chunk.
pub const MT_CHUNK: &str = "application/vnd.sealvol.chunk.v1";
/// `artifactType` of a recorded prefetch list's manifest, a referrer of the
/// version index (SPEC.md §5.8).
pub const MT_PREFETCH: &str = "application/vnd.sealvol.prefetch.v1";
/// Media type of the prefetch list blob ([`crate::prefetch`]).
pub const MT_PREFETCH_LIST: &str = "application/vnd.sealvol.prefetch.v1+json";

/// Annotation keys (SPEC.md §5.4).
pub const ANN_CREATED: &str = "org.opencontainers.image.created";
pub const ANN_VERSION: &str = "dev.sealvol.version";
pub const ANN_SIZE: &str = "dev.sealvol.size";
pub const ANN_FILES: &str = "dev.sealvol.files";
pub const ANN_SOURCE: &str = "dev.sealvol.source";
pub const ANN_ROLE: &str = "dev.sealvol.role";
pub const ANN_TREE: &str = "dev.sealvol.tree";
/// The view layer's version and tree again, under the prefix containerd's
/// unpacker passes to a snapshotter's `Prepare` (SPEC.md §5.4).
pub const ANN_SNAPSHOT_VERSION: &str = "containerd.io/snapshot/sealvol.version";
pub const ANN_SNAPSHOT_TREE: &str = "containerd.io/snapshot/sealvol.tree";

/// Values of [`ANN_ROLE`].
pub const ROLE_VIEW: &str = "view";
pub const ROLE_TREE: &str = "tree";
pub const ROLE_CHUNKS: &str = "chunks";

/// Chunk descriptors per shard manifest: about 3 MB of JSON, under the
/// 4 MiB manifest limit of CNCF distribution and zot (SPEC.md §5.2).
pub const CHUNKS_PER_SHARD: usize = 20_000;
/// Largest manifest or index we write, and the limit we argue against.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Platforms of the view manifests.
pub const VIEW_PLATFORMS: [(&str, &str); 2] = [("linux", "amd64"), ("linux", "arm64")];
/// Path of the pointer file inside the view layer.
pub const VIEW_FILE: &str = ".sealvol/version.json";
/// The empty JSON config blob of OCI 1.1 artifacts.
pub const EMPTY_JSON: &[u8] = b"{}";

#[derive(Debug, Error)]
pub enum OciError {
    #[error("cannot build OCI content: {0}")]
    Build(#[from] oci_spec::OciSpecError),
    #[error("cannot encode OCI content: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{what} is {size} bytes, over the {MAX_MANIFEST_BYTES}-byte manifest limit")]
    TooLarge { what: &'static str, size: usize },
    #[error("not a sealvol version: {0}")]
    NotAVersion(String),
    #[error("cannot lay out the version: {0}")]
    Invalid(String),
    #[error("cannot build the view layer: {0}")]
    Tar(#[from] std::io::Error),
}

/// A piece of OCI content with its bytes: a manifest, a config or a small blob.
#[derive(Clone, Debug)]
pub struct Content {
    pub descriptor: Descriptor,
    pub bytes: Vec<u8>,
}

impl Content {
    fn new(media_type: MediaType, bytes: Vec<u8>) -> Result<Content, OciError> {
        let digest = Sha256Digest::of(&bytes);
        let descriptor = DescriptorBuilder::default()
            .media_type(media_type)
            .digest(oci_digest(&digest))
            .size(bytes.len() as u64)
            .build()?;
        Ok(Content { descriptor, bytes })
    }

    pub fn digest(&self) -> Sha256Digest {
        sha256_of(&self.descriptor).expect("built with a sha256 digest")
    }
}

/// Everything a client writes to publish a version, except the chunk blobs
/// (which it reads from the files): blobs first, then manifests in an order
/// where every manifest follows what it references, then the index.
#[derive(Clone, Debug)]
pub struct BuiltVersion {
    pub digest: B3Digest,
    /// Tree index blob, empty config, view layer and view configs.
    pub blobs: Vec<Content>,
    /// Tree manifest, chunk shard manifests and view manifests.
    pub manifests: Vec<Content>,
    pub index: Content,
}

/// Facts about a version recorded in its index annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VersionMeta {
    /// RFC 3339 creation time.
    pub created: String,
    /// Where a synced version came from (`hf://…`, `s3://…`).
    pub source: Option<String>,
}

fn oci_digest(d: &Sha256Digest) -> oci_spec::image::Digest {
    d.to_string()
        .parse()
        .expect("a sha256 digest is a valid OCI digest")
}

/// The sha256 digest of a descriptor, `None` for other algorithms.
pub fn sha256_of(d: &Descriptor) -> Option<Sha256Digest> {
    d.digest().to_string().parse().ok()
}

/// Serializes with object keys sorted, so equal content gives equal bytes
/// (oci-spec keeps annotations in a `HashMap`).
pub fn canonical_json<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut v = serde_json::to_value(value)?;
    v.sort_all_objects();
    serde_json::to_vec(&v)
}

fn skipped_platform() -> Result<Platform, OciError> {
    Ok(PlatformBuilder::default()
        .os(Os::Other("unknown".into()))
        .architecture(Arch::Other("unknown".into()))
        .build()?)
}

fn manifest_content(m: &ImageManifest) -> Result<Content, OciError> {
    let bytes = canonical_json(m)?;
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(OciError::TooLarge {
            what: "a manifest",
            size: bytes.len(),
        });
    }
    Content::new(MediaType::ImageManifest, bytes)
}

fn artifact_manifest(
    artifact_type: &str,
    empty: &Content,
    layers: Vec<Descriptor>,
    annotations: HashMap<String, String>,
) -> Result<Content, OciError> {
    let m = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .artifact_type(MediaType::Other(artifact_type.into()))
        .config(empty.descriptor.clone())
        .layers(layers)
        .annotations(annotations)
        .build()?;
    manifest_content(&m)
}

fn index_entry(
    c: &Content,
    role: &str,
    artifact_type: Option<&str>,
    platform: Platform,
) -> Descriptor {
    let mut d = c.descriptor.clone();
    d.set_platform(Some(platform));
    d.set_annotations(Some(HashMap::from([(
        ANN_ROLE.to_string(),
        role.to_string(),
    )])));
    if let Some(t) = artifact_type {
        d.set_artifact_type(Some(MediaType::Other(t.into())));
    }
    d
}

/// What [`VIEW_FILE`] says: the version and its tree blob. A snapshotter
/// that finds the file unpacked in place of a version (a runtime that
/// passed it no layer annotations) reads the version from it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewPointer {
    pub version: B3Digest,
    pub tree: Sha256Digest,
}

impl ViewPointer {
    /// The largest [`VIEW_FILE`] read: the two digests and their keys.
    pub const MAX_LEN: u64 = 256;
}

/// The view layer: an uncompressed tar holding [`VIEW_FILE`], which names the
/// version and its tree blob. Deterministic: fixed owner, mode and time.
pub fn view_layer(version: &B3Digest, tree: &Sha256Digest) -> Result<Vec<u8>, OciError> {
    let body = format!("{{\"version\":\"{version}\",\"tree\":\"{tree}\"}}\n");
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_ustar();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    dir.set_mtime(0);
    dir.set_cksum();
    b.append_data(&mut dir, ".sealvol/", std::io::empty())?;
    let mut f = tar::Header::new_ustar();
    f.set_mode(0o444);
    f.set_size(body.len() as u64);
    f.set_mtime(0);
    f.set_cksum();
    b.append_data(&mut f, VIEW_FILE, body.as_bytes())?;
    Ok(b.into_inner()?)
}

/// `data` as a gzip member of stored (uncompressed) deflate blocks, with
/// mtime 0 and no name: bytes fixed by the formats alone, not by a
/// compressor's choices. The view layer ships gzipped because copy tools
/// (skopeo) compress uncompressed layers on the way to a registry, which
/// would rewrite the view manifests and the index of every copy.
pub fn gzip_stored(data: &[u8]) -> Result<Vec<u8>, OciError> {
    use std::io::Write as _;
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::none());
    gz.write_all(data)?;
    Ok(gz.finish()?)
}

/// Lays out `tree` as OCI content (SPEC.md §5).
pub fn build_version(tree: &TreeIndex, meta: &VersionMeta) -> Result<BuiltVersion, OciError> {
    let blob = tree
        .encode()
        .map_err(|e| OciError::Invalid(e.to_string()))?;
    build_version_with_blob(tree, blob, tree.format().media_type(), meta)
}

/// Lays out `tree` as OCI content around an encoding of it already made:
/// `blob` of media type `media_type`. For tools that rewrite a version's
/// tree index (a format migration, or a test's forged mirror); writers use
/// [`build_version`].
pub fn build_version_with_blob(
    tree: &TreeIndex,
    blob: Vec<u8>,
    media_type: &str,
    meta: &VersionMeta,
) -> Result<BuiltVersion, OciError> {
    build_layout(tree.entries(), blob, media_type, meta)
}

/// Lays out `entries`, valid or not, around `blob`, claiming their own
/// digest ([`crate::version::digest_of`]): a self-consistent version of
/// whatever they say, as a hostile publisher could make one. Only tests of
/// readers call this directly.
pub fn build_layout(
    entries_in: &[Entry],
    blob: Vec<u8>,
    media_type: &str,
    meta: &VersionMeta,
) -> Result<BuiltVersion, OciError> {
    let digest = crate::version::digest_of(entries_in);
    let (files, bytes) = entries_in
        .iter()
        .fold((0u64, 0u64), |(n, b), e| match &e.data {
            EntryData::File { size, .. } => (n + 1, b.saturating_add(*size)),
            _ => (n, b),
        });
    let mut blobs = Vec::new();
    let mut manifests = Vec::new();
    let mut entries = Vec::new();

    let empty = Content::new(MediaType::EmptyJSON, EMPTY_JSON.to_vec())?;
    let tree_blob = Content::new(MediaType::Other(media_type.into()), blob)?;
    let version_ann = || HashMap::from([(ANN_VERSION.to_string(), digest.to_string())]);

    // View manifests: one consistent image per platform.
    let tar_bytes = view_layer(&digest, &tree_blob.digest())?;
    let diff_id = Sha256Digest::of(&tar_bytes).to_string();
    let mut layer = Content::new(MediaType::ImageLayerGzip, gzip_stored(&tar_bytes)?)?;
    layer.descriptor.set_annotations(Some(HashMap::from([
        (ANN_VERSION.to_string(), digest.to_string()),
        (ANN_TREE.to_string(), tree_blob.digest().to_string()),
        (ANN_SNAPSHOT_VERSION.to_string(), digest.to_string()),
        (
            ANN_SNAPSHOT_TREE.to_string(),
            tree_blob.digest().to_string(),
        ),
    ])));
    let mut view_entries = Vec::new();
    for (os, arch) in VIEW_PLATFORMS {
        let config = ImageConfigurationBuilder::default()
            .os(Os::from(os))
            .architecture(Arch::from(arch))
            .rootfs(
                RootFsBuilder::default()
                    .typ("layers")
                    .diff_ids(vec![diff_id.clone()])
                    .build()?,
            )
            .build()?;
        let config = Content::new(MediaType::ImageConfig, canonical_json(&config)?)?;
        let m = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(config.descriptor.clone())
            .layers(vec![layer.descriptor.clone()])
            .annotations(version_ann())
            .build()?;
        let m = manifest_content(&m)?;
        let platform = PlatformBuilder::default()
            .os(Os::from(os))
            .architecture(Arch::from(arch))
            .build()?;
        view_entries.push(index_entry(&m, ROLE_VIEW, None, platform));
        blobs.push(config);
        manifests.push(m);
    }
    entries.extend(view_entries);

    // The tree manifest.
    let tree_manifest = artifact_manifest(
        MT_TREE_MANIFEST,
        &empty,
        vec![tree_blob.descriptor.clone()],
        version_ann(),
    )?;
    entries.push(index_entry(
        &tree_manifest,
        ROLE_TREE,
        Some(MT_TREE_MANIFEST),
        skipped_platform()?,
    ));
    manifests.push(tree_manifest);

    // Chunk shards: each distinct chunk blob once, in first-use order.
    let mut seen = HashSet::new();
    let mut chunk_descs = Vec::new();
    for e in entries_in {
        if let EntryData::File { chunks, .. } = &e.data {
            for c in chunks {
                if seen.insert(c.sha256) {
                    chunk_descs.push(
                        DescriptorBuilder::default()
                            .media_type(MediaType::Other(MT_CHUNK.into()))
                            .digest(oci_digest(&c.sha256))
                            .size(u64::from(c.length))
                            .build()?,
                    );
                }
            }
        }
    }
    for shard in chunk_descs.chunks(CHUNKS_PER_SHARD) {
        let m = artifact_manifest(MT_CHUNKS_MANIFEST, &empty, shard.to_vec(), version_ann())?;
        entries.push(index_entry(
            &m,
            ROLE_CHUNKS,
            Some(MT_CHUNKS_MANIFEST),
            skipped_platform()?,
        ));
        manifests.push(m);
    }

    let mut annotations = HashMap::from([
        (ANN_CREATED.to_string(), meta.created.clone()),
        (ANN_VERSION.to_string(), digest.to_string()),
        (ANN_SIZE.to_string(), bytes.to_string()),
        (ANN_FILES.to_string(), files.to_string()),
    ]);
    if let Some(src) = &meta.source {
        annotations.insert(ANN_SOURCE.to_string(), src.clone());
    }
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .artifact_type(MediaType::Other(MT_VERSION.into()))
        .manifests(entries)
        .annotations(annotations)
        .build()?;
    let index_bytes = canonical_json(&index)?;
    if index_bytes.len() > MAX_MANIFEST_BYTES {
        return Err(OciError::TooLarge {
            what: "the version index",
            size: index_bytes.len(),
        });
    }
    let index = Content::new(MediaType::ImageIndex, index_bytes)?;

    blobs.insert(0, tree_blob);
    blobs.insert(1, empty);
    blobs.insert(2, layer);
    Ok(BuiltVersion {
        digest,
        blobs,
        manifests,
        index,
    })
}

/// A version index read back: what a reader needs to find the tree and the
/// chunks (SPEC.md §5.5).
#[derive(Clone, Debug)]
pub struct VersionIndex {
    pub digest: B3Digest,
    pub created: Option<String>,
    pub size: Option<u64>,
    pub files: Option<u64>,
    pub source: Option<String>,
    pub tree_manifest: Descriptor,
    pub chunk_manifests: Vec<Descriptor>,
    pub view_manifests: Vec<Descriptor>,
}

fn role(d: &Descriptor) -> Option<&str> {
    d.annotations().as_ref()?.get(ANN_ROLE).map(String::as_str)
}

impl VersionIndex {
    /// Parses a version's top-level index.
    pub fn parse(bytes: &[u8]) -> Result<VersionIndex, OciError> {
        let index: ImageIndex = serde_json::from_slice(bytes)?;
        let bad = |why: &str| OciError::NotAVersion(why.to_string());
        let ann = index.annotations().clone().unwrap_or_default();
        // Copy tools that rewrite an index (skopeo when it converts a
        // layer) drop `artifactType` but keep annotations (SPEC.md §5.7).
        match index.artifact_type() {
            Some(MediaType::Other(t)) if t == MT_VERSION => {}
            None if ann.contains_key(ANN_VERSION) => {}
            _ => {
                return Err(bad(
                    "index artifactType is not application/vnd.sealvol.version.v1",
                ))
            }
        }
        let digest: B3Digest = ann
            .get(ANN_VERSION)
            .ok_or_else(|| bad("index lacks the dev.sealvol.version annotation"))?
            .parse()
            .map_err(|_| bad("dev.sealvol.version is not a b3 digest"))?;
        let mut tree = None;
        let mut chunk_manifests = Vec::new();
        let mut view_manifests = Vec::new();
        for d in index.manifests() {
            match role(d) {
                Some(ROLE_TREE) => tree = Some(d.clone()),
                Some(ROLE_CHUNKS) => chunk_manifests.push(d.clone()),
                Some(ROLE_VIEW) => view_manifests.push(d.clone()),
                _ => {}
            }
        }
        Ok(VersionIndex {
            digest,
            created: ann.get(ANN_CREATED).cloned(),
            size: ann.get(ANN_SIZE).and_then(|s| s.parse().ok()),
            files: ann.get(ANN_FILES).and_then(|s| s.parse().ok()),
            source: ann.get(ANN_SOURCE).cloned(),
            tree_manifest: tree.ok_or_else(|| bad("index has no tree manifest"))?,
            chunk_manifests,
            view_manifests,
        })
    }
}

/// The blobs an image manifest names: its config, then its layers (a view
/// manifest's, for a reader checking a copy is whole).
pub fn image_blobs(bytes: &[u8]) -> Result<Vec<Descriptor>, OciError> {
    let m: ImageManifest = serde_json::from_slice(bytes)?;
    let mut out = vec![m.config().clone()];
    out.extend(m.layers().iter().cloned());
    Ok(out)
}

/// The layers of an artifact manifest of the given `artifactType`: the tree
/// blob of a tree manifest, the chunk blobs of a shard.
pub fn artifact_layers(bytes: &[u8], artifact_type: &str) -> Result<Vec<Descriptor>, OciError> {
    let m: ImageManifest = serde_json::from_slice(bytes)?;
    match m.artifact_type() {
        Some(MediaType::Other(t)) if t == artifact_type => Ok(m.layers().clone()),
        _ => Err(OciError::NotAVersion(format!(
            "manifest artifactType is not {artifact_type}"
        ))),
    }
}

/// Content laid out as a referrer of a version index (SPEC.md §5.8,
/// §5.9): the empty config and one layer, then the manifest whose
/// `subject` is the version index.
#[derive(Clone, Debug)]
pub struct BuiltReferrer {
    /// The empty config, then the layer.
    pub blobs: Vec<Content>,
    pub manifest: Content,
    /// The manifest's descriptor as a referrers list shows it: with its
    /// `artifactType` and annotations (for the referrers tag schema).
    pub referrer: Descriptor,
}

/// The referrer manifest of `artifact_type` whose one layer is `layer`
/// (of media type `layer_type`), about the version index `index_digest`
/// of `index_size` bytes, with `annotations`.
pub fn build_referrer(
    artifact_type: &str,
    layer_type: &str,
    layer: Vec<u8>,
    index_digest: &Sha256Digest,
    index_size: u64,
    annotations: HashMap<String, String>,
) -> Result<BuiltReferrer, OciError> {
    let empty = Content::new(MediaType::EmptyJSON, EMPTY_JSON.to_vec())?;
    let blob = Content::new(MediaType::Other(layer_type.into()), layer)?;
    let subject = DescriptorBuilder::default()
        .media_type(MediaType::ImageIndex)
        .digest(oci_digest(index_digest))
        .size(index_size)
        .build()?;
    let m = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .artifact_type(MediaType::Other(artifact_type.into()))
        .config(empty.descriptor.clone())
        .layers(vec![blob.descriptor.clone()])
        .subject(subject)
        .annotations(annotations.clone())
        .build()?;
    let manifest = manifest_content(&m)?;
    let mut referrer = manifest.descriptor.clone();
    referrer.set_artifact_type(Some(MediaType::Other(artifact_type.into())));
    referrer.set_annotations(Some(annotations));
    Ok(BuiltReferrer {
        manifest,
        blobs: vec![empty, blob],
        referrer,
    })
}

/// The referrer manifest of the prefetch list `list` (its encoded bytes)
/// recorded on `version`, whose index is `index_digest`, `index_size` bytes
/// long; `created` is an RFC 3339 time, by which readers pick the newest.
pub fn build_prefetch(
    list: Vec<u8>,
    version: &B3Digest,
    index_digest: &Sha256Digest,
    index_size: u64,
    created: &str,
) -> Result<BuiltReferrer, OciError> {
    let annotations = HashMap::from([
        (ANN_VERSION.to_string(), version.to_string()),
        (ANN_CREATED.to_string(), created.to_string()),
    ]);
    build_referrer(
        MT_PREFETCH,
        MT_PREFETCH_LIST,
        list,
        index_digest,
        index_size,
        annotations,
    )
}

/// The referrer manifest of a signature bundle (SPEC.md §5.9) over the
/// version index `index_digest`: `predicate` is the statement's
/// `predicateType`; `version` is set for statements about a version.
pub fn build_signature(
    bundle: Vec<u8>,
    predicate: &str,
    version: Option<&B3Digest>,
    index_digest: &Sha256Digest,
    index_size: u64,
    created: &str,
) -> Result<BuiltReferrer, OciError> {
    use crate::signature::{ANN_BUNDLE_CONTENT, ANN_BUNDLE_PREDICATE, MT_BUNDLE};
    let mut annotations = HashMap::from([
        (ANN_BUNDLE_CONTENT.to_string(), "dsse-envelope".to_string()),
        (ANN_BUNDLE_PREDICATE.to_string(), predicate.to_string()),
        (ANN_CREATED.to_string(), created.to_string()),
    ]);
    if let Some(v) = version {
        annotations.insert(ANN_VERSION.to_string(), v.to_string());
    }
    build_referrer(
        MT_BUNDLE,
        MT_BUNDLE,
        bundle,
        index_digest,
        index_size,
        annotations,
    )
}

/// The bundle layer of a signature referrer manifest (SPEC.md §5.9), once
/// the manifest is found to be one: its `artifactType` (when it has one;
/// copy tools that predate image-spec 1.1 drop it) and one layer of the
/// bundle media type, named by sha256, of at most
/// [`crate::signature::MAX_BUNDLE_BYTES`]. Which version it signs is the
/// statement's to say, not the manifest's.
pub fn signature_layer(bytes: &[u8]) -> Result<Descriptor, OciError> {
    use crate::signature::{MAX_BUNDLE_BYTES, MT_BUNDLE};
    let bad = |why: String| OciError::NotAVersion(format!("not a signature: {why}"));
    let m: ImageManifest = serde_json::from_slice(bytes)?;
    match m.artifact_type() {
        None => {}
        Some(MediaType::Other(t)) if t == MT_BUNDLE => {}
        Some(t) => return Err(bad(format!("artifactType {t}"))),
    }
    let [layer] = m.layers().as_slice() else {
        return Err(bad(format!("it has {} layers, not 1", m.layers().len())));
    };
    if *layer.media_type() != MediaType::Other(MT_BUNDLE.into()) {
        return Err(bad(format!(
            "its layer is {}, not {MT_BUNDLE}",
            layer.media_type()
        )));
    }
    if sha256_of(layer).is_none() {
        return Err(bad("its layer is not named by sha256".into()));
    }
    if layer.size() > MAX_BUNDLE_BYTES {
        return Err(bad(format!(
            "its bundle is {} bytes, over the {MAX_BUNDLE_BYTES}-byte limit",
            layer.size()
        )));
    }
    Ok(layer.clone())
}

/// Whether a referrer descriptor (an entry of a referrers list) may be a
/// prefetch list of `version`: its `artifactType` and its
/// `dev.sealvol.version` annotation. `Some(created)` when it is, the time
/// it was recorded (empty when it has none), to pick the newest.
pub fn prefetch_candidate(d: &Descriptor, version: &B3Digest) -> Option<String> {
    match d.artifact_type() {
        Some(MediaType::Other(t)) if t == MT_PREFETCH => {}
        _ => return None,
    }
    let ann = d.annotations().as_ref();
    if ann.and_then(|a| a.get(ANN_VERSION)) != Some(&version.to_string()) {
        return None;
    }
    Some(
        ann.and_then(|a| a.get(ANN_CREATED))
            .cloned()
            .unwrap_or_default(),
    )
}

/// The list blob of a prefetch manifest, once the manifest is found to be
/// one (`artifactType`, one layer of the list's media type, at most
/// [`crate::prefetch::MAX_LIST_BYTES`]) and to be about the version index
/// `index_digest` (its `subject`) and `version` (its annotation).
pub fn prefetch_layer(
    bytes: &[u8],
    version: &B3Digest,
    index_digest: &Sha256Digest,
) -> Result<Descriptor, OciError> {
    let bad =
        |why: String| OciError::NotAVersion(format!("not a prefetch list of {version}: {why}"));
    let m: ImageManifest = serde_json::from_slice(bytes)?;
    match m.artifact_type() {
        Some(MediaType::Other(t)) if t == MT_PREFETCH => {}
        _ => return Err(bad(format!("artifactType is not {MT_PREFETCH}"))),
    }
    let subject = m.subject().as_ref().and_then(sha256_of);
    if subject != Some(*index_digest) {
        return Err(bad(format!("its subject is not {index_digest}")));
    }
    let ann = m.annotations().as_ref().and_then(|a| a.get(ANN_VERSION));
    if ann != Some(&version.to_string()) {
        return Err(bad(format!("its {ANN_VERSION} annotation differs")));
    }
    let [layer] = m.layers().as_slice() else {
        return Err(bad(format!("it has {} layers, not 1", m.layers().len())));
    };
    if *layer.media_type() != MediaType::Other(MT_PREFETCH_LIST.into()) {
        return Err(bad(format!("its layer is not {MT_PREFETCH_LIST}")));
    }
    if sha256_of(layer).is_none() {
        return Err(bad("its layer is not named by sha256".into()));
    }
    if layer.size() > crate::prefetch::MAX_LIST_BYTES {
        return Err(bad(format!(
            "its list is {} bytes, over the {}-byte limit",
            layer.size(),
            crate::prefetch::MAX_LIST_BYTES
        )));
    }
    Ok(layer.clone())
}

/// Most pages of a referrers list a reader follows (`Link: <...>;
/// rel="next"`), each at most [`MAX_MANIFEST_BYTES`].
pub const REFERRER_PAGES: usize = 16;

/// The tag under which the referrers tag schema keeps the referrers of
/// `subject`: `sha256-<hex>`.
pub fn referrers_tag(subject: &Sha256Digest) -> String {
    subject.to_string().replacen(':', "-", 1)
}

/// The target of `rel="next"` in a `Link` header: `<url>; rel="next"`.
pub fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"))
            .then(|| target.to_string())
    })
}

/// Every entry of a referrers list (an image index: the referrers API's
/// answer, or the referrers tag schema's index).
pub fn referrers_list(bytes: &[u8]) -> Result<Vec<Descriptor>, OciError> {
    let index: ImageIndex = serde_json::from_slice(bytes)?;
    Ok(index.manifests().clone())
}

/// Whether referrer `d` has `artifactType` `artifact_type`.
pub fn is_artifact(d: &Descriptor, artifact_type: &str) -> bool {
    d.artifact_type()
        .as_ref()
        .is_some_and(|t| t.to_string() == artifact_type)
}

/// The entries of a referrers list whose `artifactType` is
/// `artifact_type`; a registry may ignore the filter, and the tag schema has
/// none.
pub fn referrers_in(bytes: &[u8], artifact_type: &str) -> Result<Vec<Descriptor>, OciError> {
    let mut found = referrers_list(bytes)?;
    found.retain(|d| is_artifact(d, artifact_type));
    Ok(found)
}

/// The referrers API's answer listing `manifests`: an image index.
pub fn referrers_index(manifests: Vec<Descriptor>) -> Result<Vec<u8>, OciError> {
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(manifests)
        .build()?;
    Ok(serde_json::to_vec(&index)?)
}

/// The referrers tag schema's index with `referrer` added (or put in place
/// of an entry of the same digest): `existing` is the index the tag holds,
/// `None` when there is none yet.
pub fn add_referrer(existing: Option<&[u8]>, referrer: Descriptor) -> Result<Content, OciError> {
    let mut manifests = match existing {
        Some(bytes) => serde_json::from_slice::<ImageIndex>(bytes)?
            .manifests()
            .clone(),
        None => Vec::new(),
    };
    manifests.retain(|d| d.digest() != referrer.digest());
    manifests.push(referrer);
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(manifests)
        .build()?;
    let bytes = canonical_json(&index)?;
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(OciError::TooLarge {
            what: "the referrers index",
            size: bytes.len(),
        });
    }
    Content::new(MediaType::ImageIndex, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunking::ChunkingParams;
    use crate::tree::{ChunkRef, Entry};

    fn tree_with_chunks(n: u32) -> TreeIndex {
        let max = ChunkingParams::default().max;
        let chunks: Vec<ChunkRef> = (0..n)
            .map(|i| {
                let id = i.to_le_bytes();
                ChunkRef {
                    offset: u64::from(i) * u64::from(max),
                    length: max,
                    sha256: Sha256Digest::of(&id),
                }
            })
            .collect();
        let size = u64::from(n) * u64::from(max);
        // Made-up chaining values; the file's BLAKE3 is what they merge to.
        let pieces: Vec<[u8; 32]> = (0..crate::chain::piece_count(size))
            .map(|i| B3Digest::of(&i.to_le_bytes()).0)
            .collect();
        let e = Entry {
            path: "big.bin".into(),
            mode: 0o644,
            data: EntryData::File {
                size,
                blake3: crate::chain::combine(&pieces, size).unwrap(),
                chunks,
                pieces,
            },
        };
        TreeIndex::new(ChunkingParams::default(), vec![e]).unwrap()
    }

    #[test]
    fn the_view_file_reads_back_as_its_pointer() {
        let (version, tree) = (B3Digest::of(b"v"), Sha256Digest::of(b"t"));
        let tar = view_layer(&version, &tree).unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut body = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            if entry.path().unwrap().to_str() == Some(VIEW_FILE) {
                std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
            }
        }
        assert!(body.len() as u64 <= ViewPointer::MAX_LEN);
        let p: ViewPointer = serde_json::from_slice(&body).unwrap();
        assert_eq!(p, ViewPointer { version, tree });
    }

    #[test]
    fn layout_reaches_every_chunk_and_parses_back() {
        let t = tree_with_chunks(45_000);
        let v = build_version(
            &t,
            &VersionMeta {
                created: "2026-01-01T00:00:00Z".into(),
                source: None,
            },
        )
        .unwrap();
        let idx = VersionIndex::parse(&v.index.bytes).unwrap();
        assert_eq!(idx.digest, t.version_digest());
        assert_eq!(idx.chunk_manifests.len(), 3);
        assert_eq!(idx.view_manifests.len(), VIEW_PLATFORMS.len());
        let mut reached = HashSet::new();
        for m in &v.manifests {
            assert!(m.bytes.len() <= MAX_MANIFEST_BYTES);
            if let Ok(layers) = artifact_layers(&m.bytes, MT_CHUNKS_MANIFEST) {
                reached.extend(layers.iter().map(|d| sha256_of(d).unwrap()));
            }
        }
        assert_eq!(reached.len(), 45_000);
        let tree_m = v
            .manifests
            .iter()
            .find(|m| m.descriptor.digest() == idx.tree_manifest.digest())
            .unwrap();
        let tree_blob = &artifact_layers(&tree_m.bytes, MT_TREE_MANIFEST).unwrap()[0];
        assert_eq!(sha256_of(tree_blob).unwrap(), v.blobs[0].digest());
    }

    #[test]
    fn same_tree_same_bytes() {
        let t = tree_with_chunks(10);
        let meta = VersionMeta {
            created: "2026-01-01T00:00:00Z".into(),
            source: Some("hf://a/b".into()),
        };
        let a = build_version(&t, &meta).unwrap();
        let b = build_version(&t, &meta).unwrap();
        assert_eq!(a.index.bytes, b.index.bytes);
    }

    #[test]
    fn an_ordinary_image_index_is_not_a_version() {
        let plain = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(matches!(
            VersionIndex::parse(plain),
            Err(OciError::NotAVersion(_))
        ));
        let t = tree_with_chunks(1);
        let v = build_version(&t, &VersionMeta::default()).unwrap();
        let mut value: serde_json::Value = serde_json::from_slice(&v.index.bytes).unwrap();
        value["annotations"]["dev.sealvol.version"] = "b3:nothex".into();
        let tampered = serde_json::to_vec(&value).unwrap();
        assert!(matches!(
            VersionIndex::parse(&tampered),
            Err(OciError::NotAVersion(_))
        ));
    }

    #[test]
    fn an_index_rewritten_without_artifact_type_is_still_a_version() {
        let t = tree_with_chunks(3);
        let v = build_version(&t, &VersionMeta::default()).unwrap();
        let mut value: serde_json::Value = serde_json::from_slice(&v.index.bytes).unwrap();
        value.as_object_mut().unwrap().remove("artifactType");
        let rewritten = serde_json::to_vec(&value).unwrap();
        assert_eq!(VersionIndex::parse(&rewritten).unwrap().digest, v.digest);
        value["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(ANN_VERSION);
        let stripped = serde_json::to_vec(&value).unwrap();
        assert!(matches!(
            VersionIndex::parse(&stripped),
            Err(OciError::NotAVersion(_))
        ));
    }

    #[test]
    fn the_view_layer_is_a_gzip_of_the_tar_its_configs_name() {
        use std::io::Read as _;
        let t = tree_with_chunks(2);
        let v = build_version(&t, &VersionMeta::default()).unwrap();
        let layer = v
            .blobs
            .iter()
            .find(|c| *c.descriptor.media_type() == MediaType::ImageLayerGzip)
            .expect("a gzip view layer");
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(layer.bytes.as_slice())
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(
            tar,
            view_layer(
                &v.digest,
                &Content::new(MediaType::Other(MT_TREE_BLOB.into()), t.encode().unwrap())
                    .unwrap()
                    .digest()
            )
            .unwrap()
        );
        let diff_id = Sha256Digest::of(&tar).to_string();
        let configs: Vec<&Content> = v
            .blobs
            .iter()
            .filter(|c| *c.descriptor.media_type() == MediaType::ImageConfig)
            .collect();
        assert_eq!(configs.len(), VIEW_PLATFORMS.len());
        for c in configs {
            let cfg: serde_json::Value = serde_json::from_slice(&c.bytes).unwrap();
            assert_eq!(cfg["rootfs"]["diff_ids"], serde_json::json!([diff_id]));
        }
        // Stored blocks: the gzip is the tar plus fixed framing, so it is the
        // same whatever the compressor's version.
        assert!(layer.bytes.len() > tar.len() && layer.bytes.len() < tar.len() + 64);
    }

    #[test]
    fn a_referrers_index_lists_back_what_it_was_made_of_and_filters_by_artifact_type() {
        let entry = |n: u8, artifact: &str| -> Descriptor {
            serde_json::from_value(serde_json::json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": Sha256Digest([n; 32]).to_string(),
                "size": 7,
                "artifactType": artifact,
            }))
            .unwrap()
        };
        let sig = "application/vnd.dev.sigstore.bundle.v0.3+json";
        let entries = vec![entry(1, sig), entry(2, MT_PREFETCH), entry(3, sig)];
        let bytes = referrers_index(entries.clone()).unwrap();
        assert_eq!(referrers_list(&bytes).unwrap(), entries);
        let sigs = referrers_in(&bytes, sig).unwrap();
        assert_eq!(sigs, vec![entries[0].clone(), entries[2].clone()]);
        // A standard media type as artifactType is matched too.
        let standard = entry(4, "application/vnd.oci.image.manifest.v1+json");
        assert!(is_artifact(
            &standard,
            "application/vnd.oci.image.manifest.v1+json"
        ));
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["mediaType"], "application/vnd.oci.image.index.v1+json");
        assert_eq!(v["schemaVersion"], 2);
        assert_eq!(
            referrers_tag(&Sha256Digest([0; 32])),
            format!("sha256-{}", "00".repeat(32))
        );
        assert_eq!(
            next_link(r#"</v2/a/referrers/sha256:1?n=1&last=x>; rel="next""#).as_deref(),
            Some("/v2/a/referrers/sha256:1?n=1&last=x")
        );
    }
}
