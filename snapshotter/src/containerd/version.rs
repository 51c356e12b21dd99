//! Recognizing a sealed version's view layer in a `Prepare` (SPEC.md
//! §5.4): containerd's unpacker (CRI, `client.Pull` with unpack) passes the
//! layer's `containerd.io/snapshot/` annotations as labels, with the chain
//! ID the layer would be committed as (`containerd.io/snapshot.ref`) and,
//! from CRI, the image reference (`containerd.io/snapshot/cri.image-ref`).
//! The version is then mounted lazily and committed under the chain ID,
//! and the unpacker is told the layer exists: nothing but the tree index is
//! fetched until files are read.
//!
//! `ctr images pull` passes no labels: there the layer is unpacked, and
//! its pointer file recognized when it is committed (`service`, `images`).
//!
//! The repository comes from the image reference, never from the layer:
//! a mirror's byte-identical copy would otherwise send nodes back to the
//! origin.

use std::collections::HashMap;

use sealvol_spec::oci::{ANN_SNAPSHOT_TREE, ANN_SNAPSHOT_VERSION};
use sealvol_spec::reference::{Selector, VolumeRef};
use sealvol_spec::{B3Digest, DigestSelector};

use super::PrefetchPolicy;

/// The chain ID containerd commits an unpacked layer as.
pub const LABEL_TARGET: &str = "containerd.io/snapshot.ref";
/// A view layer annotation choosing the prefetch policy of this version's
/// mount over the snapshotter's `prefetch` (`none`, `open`, `all`).
pub const LABEL_PREFETCH: &str = "containerd.io/snapshot/sealvol.prefetch";
/// The image reference CRI passes (with `disable_snapshot_annotations =
/// false` in its configuration).
pub const LABEL_IMAGE_REF: &str = "containerd.io/snapshot/cri.image-ref";

/// A view layer to mount lazily.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionLayer {
    /// `HOST/NAMESPACE/VOLUME@b3:<hex>`: the version, pinned.
    pub reference: VolumeRef,
    /// The tree index's digest the layer names (`sha256:<hex>`).
    pub tree: String,
    /// The name to commit the mounted version as.
    pub target: String,
    /// The layer's [`LABEL_PREFETCH`], when it is a policy.
    pub prefetch: Option<PrefetchPolicy>,
}

/// The prefetch policy `labels` ask for, if any and valid.
pub fn prefetch(labels: &HashMap<String, String>) -> Option<PrefetchPolicy> {
    let value = labels.get(LABEL_PREFETCH)?;
    let policy = PrefetchPolicy::parse(value);
    if policy.is_none() {
        tracing::warn!(
            "{LABEL_PREFETCH} {value:?} is not none, open, all or recorded; the configured prefetch applies"
        );
    }
    policy
}

/// What a `Prepare`'s labels say: not a version's layer, a version's layer
/// to mount, or one that cannot be mounted (and why).
#[derive(Debug, PartialEq, Eq)]
pub enum Recognized {
    Ordinary,
    Version(VersionLayer),
    Unusable(String),
}

pub fn recognize(labels: &HashMap<String, String>) -> Recognized {
    let Some(version) = labels.get(ANN_SNAPSHOT_VERSION) else {
        return Recognized::Ordinary;
    };
    let digest: B3Digest = match version.parse() {
        Ok(d) => d,
        Err(_) => {
            return Recognized::Unusable(format!(
                "{ANN_SNAPSHOT_VERSION} {version:?} is not a version digest"
            ))
        }
    };
    let Some(target) = labels.get(LABEL_TARGET).filter(|t| !t.is_empty()) else {
        return Recognized::Unusable(format!(
            "a sealvol version's layer came without {LABEL_TARGET}; it is unpacked as an ordinary layer"
        ));
    };
    let Some(image) = labels.get(LABEL_IMAGE_REF) else {
        return Recognized::Unusable(format!(
            "a sealvol version's layer came without {LABEL_IMAGE_REF}, so it is unpacked and its repository looked up in containerd's image records when committed; with CRI, set disable_snapshot_annotations = false"
        ));
    };
    match pin(image, digest) {
        Ok(reference) => Recognized::Version(VersionLayer {
            reference,
            tree: labels.get(ANN_SNAPSHOT_TREE).cloned().unwrap_or_default(),
            target: target.clone(),
            prefetch: prefetch(labels),
        }),
        Err(why) => Recognized::Unusable(format!("{LABEL_IMAGE_REF}: {why}")),
    }
}

/// The version `version` in the repository of the image reference
/// `image` (`HOST/NAMESPACE/VOLUME:TAG`, as containerd names images).
pub fn pin(image: &str, version: B3Digest) -> Result<VolumeRef, String> {
    let image_ref: VolumeRef = image
        .parse()
        .map_err(|e| format!("{image:?} is not a registry reference: {e}"))?;
    if image_ref.registry.is_none() {
        return Err(format!("{image:?} names no registry"));
    }
    Ok(VolumeRef {
        selector: Selector::Digest(DigestSelector::B3(version)),
        path: None,
        ..image_ref
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_view_layer_is_recognized_by_its_labels() {
        let b3 = format!("b3:{}", "ab".repeat(32));
        let got = recognize(&labels(&[
            (ANN_SNAPSHOT_VERSION, &b3),
            (ANN_SNAPSHOT_TREE, "sha256:cd"),
            (LABEL_TARGET, "sha256:chain"),
            (LABEL_IMAGE_REF, "reg.example:5000/weights/qwen:prod"),
        ]));
        let Recognized::Version(v) = got else {
            panic!("{got:?}")
        };
        assert_eq!(
            v.reference.to_string(),
            format!("reg.example:5000/weights/qwen@{b3}")
        );
        assert_eq!((v.target.as_str(), v.prefetch), ("sha256:chain", None));
        for (value, want) in [("all", Some(PrefetchPolicy::All)), ("everything", None)] {
            let l = labels(&[
                (ANN_SNAPSHOT_VERSION, &b3),
                (LABEL_TARGET, "sha256:chain"),
                (LABEL_IMAGE_REF, "reg.example/w/q:1"),
                (LABEL_PREFETCH, value),
            ]);
            let Recognized::Version(v) = recognize(&l) else {
                panic!("{value}")
            };
            assert_eq!(v.prefetch, want, "{value}");
        }
        assert_eq!(
            recognize(&labels(&[(LABEL_TARGET, "x")])),
            Recognized::Ordinary
        );
        for missing in [LABEL_TARGET, LABEL_IMAGE_REF] {
            let mut l = labels(&[
                (ANN_SNAPSHOT_VERSION, &b3),
                (LABEL_TARGET, "sha256:chain"),
                (LABEL_IMAGE_REF, "reg.example/w/q:1"),
            ]);
            l.remove(missing);
            assert!(
                matches!(recognize(&l), Recognized::Unusable(_)),
                "{missing}"
            );
        }
        assert!(matches!(
            recognize(&labels(&[
                (ANN_SNAPSHOT_VERSION, "b3:zz"),
                (LABEL_TARGET, "t"),
                (LABEL_IMAGE_REF, "reg.example/w/q:1")
            ])),
            Recognized::Unusable(_)
        ));
    }
}
