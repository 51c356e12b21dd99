//! `TreeIndex::decode` on any bytes: an error or a valid tree, never a
//! panic; a tree that decodes encodes back (format 2) to a tree equal to
//! it, with the same version digest, and its stats add up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealvol_spec::TreeIndex;

fuzz_target!(|data: &[u8]| {
    let Ok(tree) = TreeIndex::decode(data) else {
        return;
    };
    let digest = tree.version_digest();
    let stats = tree.stats();
    assert!(stats.unique_chunks <= stats.chunks);
    // A file's chunks cover it exactly, so distinct chunk bytes never exceed file bytes.
    assert!(stats.unique_bytes <= stats.bytes);
    match tree.encode() {
        Ok(bytes) => {
            // Format 2 has one encoding: decoding is its inverse.
            assert_eq!(bytes, data, "a format 2 tree re-encodes to its bytes");
            let again = TreeIndex::decode(&bytes).expect("an encoded tree decodes");
            assert_eq!(again, tree);
            assert_eq!(again.version_digest(), digest);
        }
        // Format 1 cannot be written again.
        Err(sealvol_spec::tree::TreeError::Legacy) => {}
        Err(e) => panic!("a decoded tree does not encode: {e}"),
    }
});
