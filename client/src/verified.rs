//! File bytes that arrive in order, checked through the chain (SPEC.md §2.5)
//! before anyone sees them: `cat`, `verify --deep` and `upgrade` read a
//! file this way.
//!
//! Bytes are held until the 1 MiB piece they belong to is complete, checked
//! against its chaining value (or, for a file of one piece, against the
//! file's BLAKE3), and only then handed on. So a forged chunk list stops the
//! reader at the first wrong piece and none of its bytes are passed on. A
//! format 1 tree has no chaining values: its bytes are passed on as they
//! come (each chunk was checked by sha256) and the whole file is checked at
//! the end, which is why reading one warns.

use sealvol_spec::chain::{self, PieceCv, PieceHasher, PIECE};
use sealvol_spec::tree::EntryData;
use sealvol_spec::B3Digest;

use crate::Error;

/// One file being read in order; see the module documentation.
pub struct InOrder<'a> {
    path: &'a str,
    size: u64,
    root: B3Digest,
    pieces: &'a [PieceCv],
    /// Bytes of the current piece (verifiable trees only).
    buf: Vec<u8>,
    next_piece: u64,
    seen: u64,
    /// The whole-file hash of a format 1 file, computed as it passes.
    legacy: Option<PieceHasher>,
}

impl<'a> InOrder<'a> {
    /// A reader of the file `data` (an [`EntryData::File`]) at `path`;
    /// `verifiable` is the tree's [`sealvol_spec::TreeIndex::is_verifiable`].
    pub fn new(path: &'a str, data: &'a EntryData, verifiable: bool) -> Option<InOrder<'a>> {
        let EntryData::File {
            size,
            blake3,
            pieces,
            ..
        } = data
        else {
            return None;
        };
        Some(InOrder {
            path,
            size: *size,
            root: *blake3,
            pieces,
            buf: Vec::new(),
            next_piece: 0,
            seen: 0,
            legacy: (!verifiable).then(PieceHasher::new),
        })
    }

    fn forged(&self, what: String) -> Error {
        Error::Corrupt(format!(
            "{}: {what} does not match the version digest",
            self.path
        ))
    }

    /// The next bytes of the file, in order; `out` gets every verified byte.
    pub fn push(
        &mut self,
        mut data: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if self.seen + data.len() as u64 > self.size {
            return Err(self.forged(format!("more than its {} bytes", self.size)));
        }
        self.seen += data.len() as u64;
        if let Some(h) = &mut self.legacy {
            h.update(data);
            return out(data);
        }
        while !data.is_empty() {
            let range = chain::piece_range(self.size, self.next_piece);
            let want = (range.end - range.start) as usize;
            let n = (want - self.buf.len()).min(data.len());
            // A piece lying whole in `data` is checked in place, no copy.
            if self.buf.is_empty() && n == want {
                self.check(&data[..n])?;
                out(&data[..n])?;
            } else {
                self.buf.extend_from_slice(&data[..n]);
                if self.buf.len() == want {
                    let piece = std::mem::take(&mut self.buf);
                    self.check(&piece)?;
                    out(&piece)?;
                    self.buf = piece;
                    self.buf.clear();
                }
            }
            data = &data[n..];
        }
        Ok(())
    }

    /// How many bytes were passed on: every byte before this offset was
    /// verified (a format 1 file: every byte pushed).
    pub fn verified(&self) -> u64 {
        if self.legacy.is_some() {
            self.seen
        } else {
            (self.next_piece * PIECE).min(self.size)
        }
    }

    /// Forgets the bytes pushed since [`InOrder::verified`] (those of a
    /// piece that failed, or not yet complete), so that a reader can push
    /// them again from that offset, fetched another way. Not for a format 1
    /// file, whose hash has seen them.
    pub fn rewind(&mut self) {
        debug_assert!(self.legacy.is_none(), "a format 1 file cannot rewind");
        self.buf.clear();
        self.seen = self.verified();
    }

    fn check(&mut self, piece: &[u8]) -> Result<(), Error> {
        let i = self.next_piece;
        if !chain::verify_piece(self.size, &self.root, self.pieces, i, piece) {
            let start = i * PIECE;
            return Err(self.forged(format!("bytes {start}..{}", start + piece.len() as u64)));
        }
        self.next_piece += 1;
        Ok(())
    }

    /// After the last byte: checks that the file was complete (and, for a
    /// format 1 file, that its bytes have its BLAKE3).
    pub fn finish(mut self) -> Result<(), Error> {
        if self.seen != self.size || !self.buf.is_empty() {
            return Err(self.forged(format!(
                "a read of {} of its {} bytes",
                self.seen, self.size
            )));
        }
        if let Some(h) = self.legacy.take() {
            let (root, _) = h.finish();
            if root != self.root {
                return Err(self.forged(format!("its content (BLAKE3 {root})")));
            }
        }
        // An empty file has no piece to check: its BLAKE3 is fixed.
        if self.size == 0 && B3Digest::of(&[]) != self.root {
            return Err(self.forged("its empty content".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i * 7 % 253) as u8 ^ (i >> 11) as u8)
            .collect()
    }

    fn read_all(e: &EntryData, bytes: &[u8], step: usize) -> (Result<(), Error>, Vec<u8>) {
        let mut r = InOrder::new("f", e, true).unwrap();
        let mut out = Vec::new();
        for part in bytes.chunks(step.max(1)) {
            if let Err(err) = r.push(part, &mut |b| {
                out.extend_from_slice(b);
                Ok(())
            }) {
                return (Err(err), out);
            }
        }
        (r.finish(), out)
    }

    #[test]
    fn passes_the_right_bytes_in_any_split() {
        for n in [
            0,
            1,
            PIECE as usize,
            PIECE as usize + 1,
            3 * PIECE as usize + 99,
        ] {
            let d = data(n);
            let e = EntryData::file_of(&d, &[]);
            for step in [1000, 65536, PIECE as usize, 5 << 20] {
                let (r, out) = read_all(&e, &d, step);
                r.unwrap();
                assert_eq!(out, d, "{n} bytes in steps of {step}");
            }
        }
    }

    #[test]
    fn a_wrong_byte_stops_before_its_piece_is_passed_on() {
        let d = data(3 * PIECE as usize + 5);
        let e = EntryData::file_of(&d, &[]);
        let mut bad = d.clone();
        bad[PIECE as usize + 17] ^= 1;
        let (r, out) = read_all(&e, &bad, 100_000);
        let err = r.unwrap_err().to_string();
        assert!(err.contains("f: bytes 1048576..2097152"), "{err}");
        assert_eq!(out, &d[..PIECE as usize], "only the first piece passed");
        // Pushed again from where it stopped, right this time: the rest.
        let mut r = InOrder::new("f", &e, true).unwrap();
        let mut out2 = Vec::new();
        let mut keep = |b: &[u8]| {
            out2.extend_from_slice(b);
            Ok(())
        };
        assert!(r.push(&bad[..2 * PIECE as usize + 3], &mut keep).is_err());
        assert_eq!(r.verified(), PIECE);
        r.rewind();
        r.push(&d[PIECE as usize..], &mut keep).unwrap();
        r.finish().unwrap();
        assert_eq!(out2, d, "the rest passed after a rewind");
        // Small files: nothing passes.
        let d = data(5000);
        let e = EntryData::file_of(&d, &[]);
        let mut bad = d.clone();
        bad[4999] ^= 1;
        let (r, out) = read_all(&e, &bad, 1000);
        assert!(r.is_err() && out.is_empty());
        // Short and long reads are caught too.
        assert!(read_all(&e, &d[..4000], 1000).0.is_err());
        let mut long = d.clone();
        long.push(0);
        assert!(read_all(&e, &long, 1000).0.is_err());
    }
}
