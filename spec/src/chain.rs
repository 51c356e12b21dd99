//! The verification chain (SPEC.md §2.5): from the version digest down to
//! every byte range a reader serves.
//!
//! BLAKE3 is a tree: a piece that starts at a multiple of its own
//! power-of-two size is a subtree whose chaining value can be computed alone
//! and merged later. A file larger than one [`PIECE`] carries the chaining
//! values of its 1 MiB pieces in the tree index; merging them gives the
//! file's BLAKE3 root, which the version digest covers (§3). A reader checks
//! that merge once, when the index is decoded, and then checks each piece it
//! serves against its chaining value, without reading the rest of the file.
//! A file of at most one piece is its own single piece: its bytes are
//! checked against the root directly.
//!
//! The same values let a writer hash a file on many threads: pieces are
//! hashed anywhere and merged at the end, and the result is exactly
//! `blake3::hash(file)`.

use std::ops::Range;

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode,
};

use crate::digest::B3Digest;

/// Piece size: 1024 BLAKE3 chunks, 1 MiB.
pub const PIECE: u64 = 1 << 20;

/// A piece's BLAKE3 chaining value.
pub type PieceCv = ChainingValue;

/// How many chaining values a file of `size` bytes carries: one per piece
/// when it is larger than a piece, none otherwise.
pub fn piece_count(size: u64) -> u64 {
    if size > PIECE {
        size.div_ceil(PIECE)
    } else {
        0
    }
}

/// The byte range of piece `index` of a file of `size` bytes. A file of at
/// most one piece has the single piece 0, the whole file.
pub fn piece_range(size: u64, index: u64) -> Range<u64> {
    let start = index.saturating_mul(PIECE).min(size);
    start..start.saturating_add(PIECE).min(size)
}

/// The pieces a byte range `offset..end` of a file touches.
pub fn pieces_of(offset: u64, end: u64) -> Range<u64> {
    if end <= offset {
        return 0..0;
    }
    offset / PIECE..end.div_ceil(PIECE)
}

/// The chaining value of piece `index` of a file larger than [`PIECE`].
pub fn piece_cv(index: u64, data: &[u8]) -> PieceCv {
    debug_assert!(data.len() as u64 <= PIECE && !data.is_empty());
    let mut h = blake3::Hasher::new();
    h.set_input_offset(index * PIECE);
    h.update(data);
    h.finalize_non_root()
}

/// The root hash of a file of `len` bytes (`len > PIECE`) from the
/// chaining values of all its pieces, in order. `None` when the count does
/// not fit the length.
pub fn combine(cvs: &[PieceCv], len: u64) -> Option<B3Digest> {
    if len <= PIECE || cvs.len() as u64 != len.div_ceil(PIECE) {
        return None;
    }
    let (left, right) = split(cvs, len);
    Some(B3Digest(
        *merge_subtrees_root(&left, &right, Mode::Hash).as_bytes(),
    ))
}

/// The two children of the subtree covering `len` bytes. Left subtrees are
/// powers of two of at least `PIECE` bytes, so they hold whole pieces.
fn split(cvs: &[PieceCv], len: u64) -> (PieceCv, PieceCv) {
    let left_len = left_subtree_len(len);
    let n = (left_len / PIECE) as usize;
    (
        subtree(&cvs[..n], left_len),
        subtree(&cvs[n..], len - left_len),
    )
}

fn subtree(cvs: &[PieceCv], len: u64) -> PieceCv {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let (left, right) = split(cvs, len);
    merge_subtrees_non_root(&left, &right, Mode::Hash)
}

/// Checks the bytes of piece `index` of a file (`size` bytes, BLAKE3 `root`,
/// chaining values `pieces`, as the tree index gives them). `data` must be
/// the whole piece ([`piece_range`]).
pub fn verify_piece(
    size: u64,
    root: &B3Digest,
    pieces: &[PieceCv],
    index: u64,
    data: &[u8],
) -> bool {
    verify_piece_parts(size, root, pieces, index, &[data])
}

/// [`verify_piece`] of a piece given as consecutive parts (as the chunks
/// that hold it give it), hashed in place rather than joined first.
pub fn verify_piece_parts(
    size: u64,
    root: &B3Digest,
    pieces: &[PieceCv],
    index: u64,
    parts: &[&[u8]],
) -> bool {
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let range = piece_range(size, index);
    if range.end - range.start != len {
        return false;
    }
    let mut h = blake3::Hasher::new();
    if size <= PIECE {
        for p in parts {
            h.update(p);
        }
        return index == 0 && B3Digest(*h.finalize().as_bytes()) == *root;
    }
    match pieces.get(index as usize) {
        Some(cv) if len > 0 => {
            h.set_input_offset(index * PIECE);
            for p in parts {
                h.update(p);
            }
            h.finalize_non_root() == *cv
        }
        _ => false,
    }
}

/// Hashes a file streamed in order: its chaining values and root, as a
/// writer records them. Memory is one piece.
#[derive(Default)]
pub struct PieceHasher {
    buf: Vec<u8>,
    cvs: Vec<PieceCv>,
    len: u64,
}

impl PieceHasher {
    pub fn new() -> PieceHasher {
        PieceHasher::default()
    }

    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.buf.len() as u64 == PIECE {
                // Only hashed once more bytes follow: a file of exactly one
                // piece has no chaining values.
                self.cvs.push(piece_cv(self.cvs.len() as u64, &self.buf));
                self.buf.clear();
            }
            let room = PIECE as usize - self.buf.len();
            let n = room.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            self.len += n as u64;
            data = &data[n..];
        }
    }

    /// The file's BLAKE3 and its chaining values (empty for a file of at
    /// most one piece).
    pub fn finish(mut self) -> (B3Digest, Vec<PieceCv>) {
        if self.cvs.is_empty() {
            return (B3Digest::of(&self.buf), Vec::new());
        }
        self.cvs.push(piece_cv(self.cvs.len() as u64, &self.buf));
        let root = combine(&self.cvs, self.len).expect("one value per piece");
        (root, self.cvs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_pieces(data: &[u8]) -> B3Digest {
        let cvs: Vec<_> = data
            .chunks(PIECE as usize)
            .enumerate()
            .map(|(i, p)| piece_cv(i as u64, p))
            .collect();
        combine(&cvs, data.len() as u64).unwrap()
    }

    fn data(len: u64, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(seed | 1) ^ (i >> 13) as u8)
            .collect()
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
            let data = data(len, 31);
            assert_eq!(by_pieces(&data), B3Digest::of(&data), "len {len}");
        }
    }

    #[test]
    fn streaming_hasher_matches_for_any_split() {
        for len in [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 7] {
            let d = data(len, 7);
            let mut h = PieceHasher::new();
            for part in d.chunks(333_333) {
                h.update(part);
            }
            let (root, cvs) = h.finish();
            assert_eq!(root, B3Digest::of(&d), "len {len}");
            assert_eq!(cvs.len() as u64, piece_count(len));
        }
    }

    #[test]
    fn a_count_that_does_not_fit_the_length_combines_to_nothing() {
        let cv = piece_cv(0, &[1; 10]);
        assert!(combine(&[cv], 2 * PIECE).is_none());
        assert!(combine(&[cv, cv], PIECE).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn equals_plain_blake3(len in (PIECE + 1)..(9 * PIECE), seed in any::<u8>()) {
            let d = data(len, seed);
            prop_assert_eq!(by_pieces(&d), B3Digest::of(&d));
        }

        /// Every piece of any file verifies, and a flipped byte in it, or a
        /// flipped bit of its chaining value, is caught.
        #[test]
        fn every_piece_verifies_and_any_flip_is_caught(
            len in 0u64..(5 * PIECE), seed in any::<u8>(), at in any::<u64>(), bit in 0u8..8,
        ) {
            let d = data(len, seed);
            let mut h = PieceHasher::new();
            h.update(&d);
            let (root, cvs) = h.finish();
            let n = piece_count(len).max(1);
            for i in 0..n {
                let r = piece_range(len, i);
                let piece = &d[r.start as usize..r.end as usize];
                prop_assert!(verify_piece(len, &root, &cvs, i, piece));
                // In parts, cut anywhere, as chunks cut a piece.
                let cut = (at as usize) % (piece.len() + 1);
                let (a, b) = piece.split_at(cut);
                prop_assert!(verify_piece_parts(len, &root, &cvs, i, &[a, &[], b]));
                if !b.is_empty() {
                    prop_assert!(!verify_piece_parts(len, &root, &cvs, i, &[a, &b[1..]]));
                }
            }
            if len > 0 {
                let pos = at % len;
                let i = pos / PIECE;
                let r = piece_range(len, i);
                let mut piece = d[r.start as usize..r.end as usize].to_vec();
                piece[(pos - r.start) as usize] ^= 1 << bit;
                prop_assert!(!verify_piece(len, &root, &cvs, i, &piece));
                if !cvs.is_empty() {
                    let mut bad = cvs.clone();
                    bad[i as usize][bit as usize] ^= 1;
                    prop_assert!(combine(&bad, len) != Some(root));
                }
            }
        }
    }
}
