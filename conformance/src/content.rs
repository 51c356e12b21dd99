//! Test content: digests, media types, blobs and the manifests that
//! reference them. Everything is built in memory, with the bytes kept so
//! pulls can be compared byte for byte.

use serde_json::{json, Map, Value};
use sha2::{Digest as _, Sha256};

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image config.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// OCI uncompressed layer.
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
/// The OCI empty descriptor's media type (content `{}`).
pub const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// `Accept` for manifest pulls: the OCI types plus Docker's, so registries
/// that negotiate do not convert or refuse.
pub const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";
/// Content type of blob uploads.
pub const OCTET_STREAM: &str = "application/octet-stream";

/// Annotation carrying the run id, so content differs between runs.
pub const ANN_RUN: &str = "org.sealvol.conformance.run";
/// Annotation naming what a manifest is for.
pub const ANN_PURPOSE: &str = "org.sealvol.conformance.purpose";
/// Annotation used to pad manifests to a size.
pub const ANN_PADDING: &str = "org.sealvol.conformance.padding";

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A blob with its digest and the media type descriptors give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub media_type: String,
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl Blob {
    pub fn new(media_type: &str, bytes: Vec<u8>) -> Blob {
        Blob {
            media_type: media_type.to_string(),
            digest: sha256_digest(&bytes),
            bytes,
        }
    }

    /// The OCI empty blob `{}`.
    pub fn empty() -> Blob {
        Blob::new(OCI_EMPTY, b"{}".to_vec())
    }

    /// `size` bytes of text that depend on `seed` (different per run and
    /// per purpose), never all alike so ranges are distinguishable.
    pub fn filled(media_type: &str, seed: &str, size: usize) -> Blob {
        let mut bytes = Vec::with_capacity(size + 64);
        let mut i = 0u64;
        while bytes.len() < size {
            bytes.extend_from_slice(format!("{seed}:{i};").as_bytes());
            i += 1;
        }
        bytes.truncate(size);
        Blob::new(media_type, bytes)
    }

    pub fn descriptor(&self) -> Value {
        json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.bytes.len(),
        })
    }

    /// This blob's descriptor under another media type (same content).
    pub fn descriptor_as(&self, media_type: &str) -> Value {
        json!({
            "mediaType": media_type,
            "digest": self.digest,
            "size": self.bytes.len(),
        })
    }
}

/// A manifest document: its media type, exact bytes and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub media_type: String,
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl Manifest {
    /// Serialises `doc` (compact JSON) as a manifest of `media_type`.
    pub fn from_json(media_type: &str, doc: &Value) -> Manifest {
        let bytes = serde_json::to_vec(doc).unwrap_or_default();
        Manifest {
            media_type: media_type.to_string(),
            digest: sha256_digest(&bytes),
            bytes,
        }
    }

    /// Descriptor of this manifest, as an index or a `subject` lists it.
    pub fn descriptor(&self) -> Value {
        json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.bytes.len(),
        })
    }
}

/// Optional parts of an image manifest.
#[derive(Debug, Default, Clone)]
pub struct ManifestExtras<'a> {
    pub artifact_type: Option<&'a str>,
    pub subject: Option<Value>,
    pub annotations: Vec<(&'a str, String)>,
}

/// An OCI image manifest referencing `config` and `layers`.
pub fn image_manifest(config: Value, layers: Vec<Value>, extras: ManifestExtras<'_>) -> Manifest {
    let mut doc = Map::new();
    doc.insert("schemaVersion".into(), json!(2));
    doc.insert("mediaType".into(), json!(OCI_MANIFEST));
    if let Some(t) = extras.artifact_type {
        doc.insert("artifactType".into(), json!(t));
    }
    doc.insert("config".into(), config);
    doc.insert("layers".into(), Value::Array(layers));
    if let Some(s) = extras.subject {
        doc.insert("subject".into(), s);
    }
    if !extras.annotations.is_empty() {
        let ann: Map<String, Value> = extras
            .annotations
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect();
        doc.insert("annotations".into(), Value::Object(ann));
    }
    Manifest::from_json(OCI_MANIFEST, &Value::Object(doc))
}

/// An OCI image index listing `manifests` (descriptors).
pub fn image_index(manifests: Vec<Value>, annotations: Vec<(&str, String)>) -> Manifest {
    let mut doc = Map::new();
    doc.insert("schemaVersion".into(), json!(2));
    doc.insert("mediaType".into(), json!(OCI_INDEX));
    doc.insert("manifests".into(), Value::Array(manifests));
    if !annotations.is_empty() {
        let ann: Map<String, Value> = annotations
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect();
        doc.insert("annotations".into(), Value::Object(ann));
    }
    Manifest::from_json(OCI_INDEX, &Value::Object(doc))
}

/// A descriptor with a `platform`, for index entries.
pub fn with_platform(mut descriptor: Value, architecture: &str, os: &str) -> Value {
    if let Some(obj) = descriptor.as_object_mut() {
        obj.insert(
            "platform".into(),
            json!({ "architecture": architecture, "os": os }),
        );
    }
    descriptor
}

/// An image manifest of exactly `target` bytes: `config` and `layers`
/// plus a padding annotation. `None` if `target` is too small.
pub fn padded_manifest(
    config: &Value,
    layers: &[Value],
    run: &str,
    target: usize,
) -> Option<Manifest> {
    let build = |pad: String| {
        image_manifest(
            config.clone(),
            layers.to_vec(),
            ManifestExtras {
                annotations: vec![(ANN_RUN, run.to_string()), (ANN_PADDING, pad)],
                ..Default::default()
            },
        )
    };
    let bare = build(String::new()).bytes.len();
    let pad = target.checked_sub(bare)?;
    let m = build("x".repeat(pad));
    (m.bytes.len() == target).then_some(m)
}

/// A minimal OCI image config for `layer_digests` (uncompressed, so the
/// diff ids are the layer digests), labelled with the run.
pub fn image_config(layer_digests: &[&str], run: &str) -> Blob {
    let doc = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Labels": { ANN_RUN: run } },
        "rootfs": { "type": "layers", "diff_ids": layer_digests },
    });
    Blob::new(OCI_CONFIG, serde_json::to_vec(&doc).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_of_empty_object() {
        assert_eq!(
            Blob::empty().digest,
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn filled_blobs_have_the_size_and_differ_by_seed() {
        let a = Blob::filled(OCI_LAYER, "run1", 1000);
        let b = Blob::filled(OCI_LAYER, "run2", 1000);
        assert_eq!(a.bytes.len(), 1000);
        assert_ne!(a.digest, b.digest);
        assert_ne!(a.bytes[0..10], a.bytes[10..20]);
    }

    #[test]
    fn manifests_carry_their_fields() {
        let cfg = Blob::empty();
        let subject = Manifest::from_json(OCI_MANIFEST, &json!({"x": 1}));
        let m = image_manifest(
            cfg.descriptor(),
            vec![cfg.descriptor()],
            ManifestExtras {
                artifact_type: Some("application/x"),
                subject: Some(subject.descriptor()),
                annotations: vec![(ANN_RUN, "r".into())],
            },
        );
        let v: Value = serde_json::from_slice(&m.bytes).unwrap();
        assert_eq!(v["mediaType"], OCI_MANIFEST);
        assert_eq!(v["artifactType"], "application/x");
        assert_eq!(v["subject"]["digest"], subject.digest.as_str());
        assert_eq!(v["annotations"][ANN_RUN], "r");
        assert_eq!(m.digest, sha256_digest(&m.bytes));
        let idx = image_index(
            vec![with_platform(m.descriptor(), "amd64", "linux")],
            vec![],
        );
        let v: Value = serde_json::from_slice(&idx.bytes).unwrap();
        assert_eq!(v["manifests"][0]["platform"]["os"], "linux");
    }

    #[test]
    fn padding_hits_the_target_exactly() {
        let cfg = Blob::empty();
        let m = padded_manifest(&cfg.descriptor(), &[cfg.descriptor()], "r", 10_000).unwrap();
        assert_eq!(m.bytes.len(), 10_000);
        assert!(padded_manifest(&cfg.descriptor(), &[], "r", 10).is_none());
    }
}
