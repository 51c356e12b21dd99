//! The OCI manifests a reader parses (SPEC.md §5): a version index, a tree
//! or chunks manifest's layers, an image manifest's blobs. Errors, never
//! panics; what parses keeps its shape.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealvol_spec::oci::{
    artifact_layers, image_blobs, VersionIndex, MT_CHUNKS_MANIFEST, MT_TREE_MANIFEST,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = VersionIndex::parse(data) {
        // The digest it names prints as it parses.
        let printed = index.digest.to_string();
        assert_eq!(
            printed.parse::<sealvol_spec::B3Digest>().ok(),
            Some(index.digest)
        );
        for d in index.chunk_manifests.iter().chain(&index.view_manifests) {
            let _ = sealvol_spec::oci::sha256_of(d);
        }
        let _ = sealvol_spec::oci::sha256_of(&index.tree_manifest);
    }
    for t in [MT_TREE_MANIFEST, MT_CHUNKS_MANIFEST] {
        if let Ok(layers) = artifact_layers(data, t) {
            for d in &layers {
                let _ = sealvol_spec::oci::sha256_of(d);
            }
        }
    }
    if let Ok(blobs) = image_blobs(data) {
        assert!(!blobs.is_empty(), "an image manifest names its config");
    }
});
