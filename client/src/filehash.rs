//! The whole-file BLAKE3, computed from 1 MiB pieces hashed on any thread.
//!
//! BLAKE3 is a tree: a piece that starts at a multiple of its own
//! power-of-two size is a subtree whose chaining value can be computed
//! alone and merged later. Splitting files into such pieces lets the chunk
//! hashers share the file hash instead of leaving it on the reader thread,
//! which would otherwise be the pipeline's serial bottleneck. The result is
//! exactly `blake3::hash(file)`.

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode,
};

/// Piece size: 1024 BLAKE3 chunks.
pub const PIECE: u64 = 1 << 20;

/// The chaining value of piece `index` of a file longer than [`PIECE`].
pub fn piece_cv(index: u64, data: &[u8]) -> ChainingValue {
    debug_assert!(data.len() as u64 <= PIECE && !data.is_empty());
    let mut h = blake3::Hasher::new();
    h.set_input_offset(index * PIECE);
    h.update(data);
    h.finalize_non_root()
}

/// The root hash of a file of `len` bytes (`len > PIECE`) from the
/// chaining values of all its pieces, in order.
pub fn combine(cvs: &[ChainingValue], len: u64) -> blake3::Hash {
    assert!(len > PIECE && cvs.len() as u64 == len.div_ceil(PIECE));
    let (left, right) = split(cvs, len);
    merge_subtrees_root(&left, &right, Mode::Hash)
}

/// The two children of the subtree covering `len` bytes. Left subtrees are
/// powers of two of at least `PIECE` bytes, so they hold whole pieces.
fn split(cvs: &[ChainingValue], len: u64) -> (ChainingValue, ChainingValue) {
    let left_len = left_subtree_len(len);
    let n = (left_len / PIECE) as usize;
    (
        subtree(&cvs[..n], left_len),
        subtree(&cvs[n..], len - left_len),
    )
}

fn subtree(cvs: &[ChainingValue], len: u64) -> ChainingValue {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let (left, right) = split(cvs, len);
    merge_subtrees_non_root(&left, &right, Mode::Hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_pieces(data: &[u8]) -> blake3::Hash {
        let cvs: Vec<_> = data
            .chunks(PIECE as usize)
            .enumerate()
            .map(|(i, p)| piece_cv(i as u64, p))
            .collect();
        combine(&cvs, data.len() as u64)
    }

    #[test]
    fn edges() {
        for len in [
            PIECE + 1,
            2 * PIECE,
            2 * PIECE + 1,
            3 * PIECE,
            4 * PIECE,
            4 * PIECE + 1024,
            7 * PIECE - 1,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert_eq!(by_pieces(&data), blake3::hash(&data), "len {len}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn equals_plain_blake3(len in (PIECE + 1)..(9 * PIECE), seed in any::<u8>()) {
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
            prop_assert_eq!(by_pieces(&data), blake3::hash(&data));
        }
    }
}
