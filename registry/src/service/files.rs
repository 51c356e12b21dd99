//! The files of sealed versions, read from the stored chunks and checked
//! through the verification chain (SPEC.md §2.5) before a byte leaves:
//! what the gateways (the Hugging Face Hub API, `http::hf`; later S3) serve.
//!
//! A request names a volume and a version (a [`Selector`]: `head`, a tag,
//! a version digest or a prefix of one, such as the 40-hex commit id the
//! Hub gateway hands out);
//! [`resolve`] finds the alive version and its tree index, [`file()`] one
//! file entry of it, and [`open`] streams any byte range of that file. The
//! range is served piece by piece: each 1 MiB piece that overlaps it is
//! read from the chunk blobs that cover it (only the bytes of the pieces,
//! never whole chunks or whole files), hashed, and compared with the
//! piece's chaining value, or for a file of one piece with its BLAKE3.
//! Pieces are read and hashed four at a time, so that a large chunk part
//! is one read (mapped, not copied) and a span one hashing task. So a
//! chunk damaged in the blob store (bitrot, a tampered bucket under an
//! object-store registry) ends the answer with an error, never with wrong
//! bytes. The first piece is checked before [`open`] returns, so a damaged
//! start becomes an error status; a later damaged piece breaks the body
//! off, which every HTTP client reports as a failed download.
//!
//! What it is not: a cache (each request reads its chunks again, as a
//! blob `GET` does), nor a writer, nor a reader of deleted versions (a
//! deleted version is not served until it is restored). A format 1 tree
//! has no chaining values: its files of at most one piece are checked
//! against their BLAKE3, and larger ones are refused rather than served
//! unchecked (`sealvol upgrade` makes a format 2 version of it).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use sealvol_spec::api::Lifecycle;
use sealvol_spec::chain::{self, PieceCv, PIECE};
use sealvol_spec::tree::{chunks_covering, ChunkRef, EntryData, TreeIndex};
use sealvol_spec::{B3Digest, DigestSelector, Selector};
use tokio::io::AsyncReadExt as _;

use crate::error::{Code, RegistryError};
use crate::service::{trees, volumes};
use crate::state::app::App;
use crate::store::{BlobBody, BlobStore};

/// Pieces read and checked together: one read of each chunk part that
/// covers the span (a part over 1 MiB is mapped from the blob file rather
/// than copied) and one hashing task, rather than a read, a copy and a
/// task per piece.
const SPAN_PIECES: u64 = 4;

/// How many spans of one answer are read and checked ahead of the one
/// being sent: enough to keep the disk or the bucket busy while a span is
/// hashed; at most this many times 4 MiB held per answer.
const AHEAD: usize = 2;

/// How many chunk parts of one span are read at once (an object store
/// answers each after a round trip).
const PARTS_AT_ONCE: usize = 4;

/// Why a file cannot be served; each gateway answers these in its own
/// dialect.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("volume {0} is not known")]
    VolumeUnknown(String),
    #[error("{repo} has no version {selector}")]
    VersionUnknown { repo: String, selector: String },
    #[error("{0}: no such file in this version")]
    PathUnknown(String),
    #[error("{path}: bytes {start}-{end} lie outside its {size} bytes")]
    RangeNotSatisfiable {
        path: String,
        start: u64,
        end: u64,
        size: u64,
    },
    /// A piece's bytes as the stored chunks give them do not match the
    /// chain: the blob store holds damaged chunks.
    #[error("{path}: bytes {start}..{end} as stored do not match the version digest ({why}); the registry's blob store is damaged, push the version again")]
    Corrupt {
        path: String,
        start: u64,
        end: u64,
        why: String,
    },
    #[error("{0}: a file of a format 1 version larger than 1 MiB cannot be checked piece by piece; make a format 2 version of it with `sealvol upgrade`")]
    Unverifiable(String),
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// A version a selector named: its digest, when the registry recorded it,
/// and its tree.
pub struct Resolved {
    pub digest: B3Digest,
    pub created_at: Option<String>,
    pub tree: Arc<TreeIndex>,
}

/// Finds the alive version of `repo` that `selector` names, and its tree.
pub async fn resolve(app: &App, repo: &str, selector: &Selector) -> Result<Resolved, FileError> {
    let unknown = || FileError::VersionUnknown {
        repo: repo.to_string(),
        selector: match selector {
            Selector::Head => "head".to_string(),
            Selector::Tag(t) => t.to_string(),
            Selector::Digest(d) => d.to_string(),
        },
    };
    // The store's refusals, as this module names them.
    let refused = |e: RegistryError| {
        if e.is(Code::VolumeUnknown) || e.is(Code::NameUnknown) {
            FileError::VolumeUnknown(repo.to_string())
        } else if e.is(Code::VersionUnknown) {
            unknown()
        } else {
            FileError::Registry(e)
        }
    };
    let version = match selector {
        Selector::Head | Selector::Tag(_) => {
            let volume = volumes::get(app, repo).await.map_err(refused)?;
            let digest = match selector {
                Selector::Tag(t) => {
                    (volume.tags.iter().find(|i| i.tag == t.as_str())).map(|i| i.digest)
                }
                _ => volume.head.as_ref().map(|h| h.digest),
            }
            .ok_or_else(unknown)?;
            volumes::version(app, repo, &digest.to_string())
                .await
                .map_err(refused)?
        }
        Selector::Digest(DigestSelector::B3(d)) => volumes::version(app, repo, &d.to_string())
            .await
            .map_err(refused)?,
        // A prefix (SPEC.md §1.3; the Hub gateway's commit ids are 40 hex
        // digits of one) names one alive version, never a guess.
        Selector::Digest(d) => {
            let alive = volumes::versions(app, repo, false).await.map_err(refused)?;
            let digest = d
                .resolve(alive.iter().map(|v| &v.digest))
                .map_err(|_| unknown())?;
            (alive.into_iter().find(|v| v.digest == digest)).ok_or_else(unknown)?
        }
    };
    if version.lifecycle != Lifecycle::Alive {
        return Err(unknown());
    }
    let digest = version.digest;
    let tree = trees::tree_of(app, repo, &digest.to_string()).await?;
    Ok(Resolved {
        digest,
        created_at: version.created_at,
        tree,
    })
}

/// One file of a version: what reading it needs.
#[derive(Clone, Debug)]
pub struct File {
    pub path: String,
    pub size: u64,
    /// Its BLAKE3 (SPEC.md §2.1), which the version digest covers.
    pub blake3: B3Digest,
    chunks: Vec<ChunkRef>,
    pieces: Vec<PieceCv>,
}

impl File {
    /// The file entry of `data`, at `path`; `None` for a directory or a
    /// symlink.
    pub fn of(path: &str, data: &EntryData) -> Option<File> {
        match data {
            EntryData::File {
                size,
                blake3,
                chunks,
                pieces,
            } => Some(File {
                path: path.to_string(),
                size: *size,
                blake3: *blake3,
                chunks: chunks.clone(),
                pieces: pieces.clone(),
            }),
            EntryData::Dir | EntryData::Symlink { .. } => None,
        }
    }
}

/// The file at `path` in `tree`. Directories and symlinks are not files.
pub fn file(tree: &TreeIndex, path: &str) -> Result<File, FileError> {
    let unknown = || FileError::PathUnknown(path.to_string());
    let entry = tree.get(path).ok_or_else(unknown)?;
    let file = File::of(&entry.path, &entry.data).ok_or_else(unknown)?;
    if !tree.is_verifiable() && file.size > PIECE {
        return Err(FileError::Unverifiable(file.path));
    }
    Ok(file)
}

/// The verified bytes of a range, in order.
pub type FileBody = BoxStream<'static, Result<Bytes, FileError>>;

/// Bytes `range` of `file` (`range.end <= file.size`), read from `blobs`:
/// the first piece already read and checked, the rest read and checked as
/// the body is polled (see the module documentation).
pub async fn open(
    blobs: Arc<dyn BlobStore>,
    file: Arc<File>,
    range: Range<u64>,
) -> Result<FileBody, FileError> {
    if range.end > file.size || range.start > range.end {
        return Err(FileError::RangeNotSatisfiable {
            path: file.path.clone(),
            start: range.start,
            end: range.end,
            size: file.size,
        });
    }
    let pieces = chain::pieces_of(range.start, range.end);
    let spans: Vec<Range<u64>> = pieces
        .clone()
        .step_by(SPAN_PIECES as usize)
        .map(|first| first..(first + SPAN_PIECES).min(pieces.end))
        .collect();
    let want = range.clone();
    let mut spans = stream::iter(spans)
        .map(move |s| {
            let (blobs, file, want) = (Arc::clone(&blobs), Arc::clone(&file), want.clone());
            async move {
                let (parts, damage) = span(blobs.as_ref(), &file, s).await;
                let bytes: Vec<Bytes> = parts
                    .into_iter()
                    .map(|(at, b)| b.slice(within(at, b.len(), &want)))
                    .filter(|b| !b.is_empty())
                    .collect();
                (bytes, damage)
            }
        })
        .buffered(AHEAD);
    let Some((first, damage)) = spans.next().await else {
        return Ok(stream::empty().boxed());
    };
    // The range's first piece failed: an error status, not a body.
    if let Some(e) = damage.as_ref().filter(|_| first.is_empty()) {
        tracing::debug!("{e}");
        return Err(damage.expect("checked above"));
    }
    let sent = |(bytes, damage): (Vec<Bytes>, Option<FileError>)| {
        let tail = damage.map(|e| {
            // The answer's head is gone already: the client sees a body
            // cut short, the log says why.
            tracing::error!("{e}");
            Err(e)
        });
        stream::iter(bytes.into_iter().map(Ok).chain(tail))
    };
    // A damaged piece ends the body: nothing after it is read or sent.
    let mut ended = false;
    let rest = spans.flat_map(sent).take_while(move |r| {
        let go = !ended;
        ended |= r.is_err();
        futures_util::future::ready(go)
    });
    Ok(sent((first, damage)).chain(rest).boxed())
}

/// The part of a piece that starts at file offset `at` and holds `len`
/// bytes which falls in `want`, as indexes into the piece.
fn within(at: u64, len: usize, want: &Range<u64>) -> Range<usize> {
    let end = at + len as u64;
    let from = want.start.clamp(at, end) - at;
    let to = want.end.clamp(at, end) - at;
    from as usize..to as usize
}

/// Pieces `pieces` of `file`, read from the chunks that cover them and
/// checked against the chain: the bytes of the pieces that check out, in
/// order from the first, as (file offset, bytes) runs of the chunk parts
/// read; and why the next piece, if any, is not among them (a chunk that
/// could not be read, or bytes that differ from the chain).
async fn span(
    blobs: &dyn BlobStore,
    file: &Arc<File>,
    pieces: Range<u64>,
) -> (Vec<(u64, Bytes)>, Option<FileError>) {
    let start = chain::piece_range(file.size, pieces.start).start;
    let end = chain::piece_range(file.size, pieces.end - 1).end;
    let corrupt = |index: u64, why: String| {
        let r = chain::piece_range(file.size, index);
        FileError::Corrupt {
            path: file.path.clone(),
            start: r.start,
            end: r.end,
            why,
        }
    };
    let covering = file.chunks[chunks_covering(&file.chunks, start, end)].to_vec();
    let mut reads = stream::iter(covering)
        .map(|c: ChunkRef| async move {
            let from = start.max(c.offset) - c.offset;
            let to = end.min(c.offset + u64::from(c.length)) - c.offset;
            let part = read_exactly(blobs, &c, from, to - from).await;
            (c.offset + from, c, part)
        })
        .buffered(PARTS_AT_ONCE);
    // The bytes read, from `start` up to `read_to` without a gap.
    let (mut parts, mut read_to, mut failed) = (Vec::new(), start, None);
    while let Some((at, c, part)) = reads.next().await {
        match part {
            Ok(bytes) if at == read_to => {
                read_to += bytes.len() as u64;
                parts.push((at, bytes));
            }
            Ok(_) => {
                failed = Some(format!("its chunk list leaves bytes {read_to}..{at} out"));
                break;
            }
            Err(e) => {
                failed = Some(format!("chunk {}: {e}", c.sha256));
                break;
            }
        }
    }
    if failed.is_none() && read_to < end {
        failed = Some(format!(
            "its chunk list gives {} of its {} bytes",
            read_to - start,
            end - start
        ));
    }
    // The pieces the bytes read cover whole, checked in one task off the
    // async threads (hashing a MiB takes a few hundred microseconds).
    let whole: Vec<u64> = pieces
        .clone()
        .take_while(|i| chain::piece_range(file.size, *i).end <= read_to)
        .collect();
    let checked = parts.clone();
    let f = Arc::clone(file);
    let bad = tokio::task::spawn_blocking(move || {
        whole.into_iter().find(|&i| {
            let r = chain::piece_range(f.size, i);
            let slices: Vec<&[u8]> = checked
                .iter()
                .map(|(at, b)| &b[within(*at, b.len(), &r)])
                .filter(|s| !s.is_empty())
                .collect();
            !chain::verify_piece_parts(f.size, &f.blake3, &f.pieces, i, &slices)
        })
    })
    .await;
    let (good_to, damage) = match bad {
        Err(e) => (start, Some(FileError::Registry(RegistryError::internal(e)))),
        Ok(Some(i)) => (
            chain::piece_range(file.size, i).start,
            Some(corrupt(i, "its BLAKE3 differs".into())),
        ),
        Ok(None) => match failed {
            // The first piece the bytes read do not cover whole.
            Some(why) => {
                let i = pieces
                    .clone()
                    .find(|i| chain::piece_range(file.size, *i).end > read_to)
                    .unwrap_or(pieces.start);
                (
                    chain::piece_range(file.size, i).start,
                    Some(corrupt(i, why)),
                )
            }
            None => (end, None),
        },
    };
    let good: Vec<(u64, Bytes)> = parts
        .into_iter()
        .filter(|(at, _)| *at < good_to)
        .map(|(at, b)| {
            let keep = (good_to - at).min(b.len() as u64) as usize;
            (at, b.slice(..keep))
        })
        .collect();
    (good, damage)
}

/// Why a chunk's bytes could not be read.
#[derive(Debug, thiserror::Error)]
enum ChunkError {
    #[error("not stored")]
    Missing,
    #[error("{got} bytes where {want} were asked for")]
    Short { got: u64, want: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Exactly `len` bytes of chunk `c` from `offset`; never more than `len`
/// held, whatever the store answers.
async fn read_exactly(
    blobs: &dyn BlobStore,
    c: &ChunkRef,
    offset: u64,
    len: u64,
) -> Result<Bytes, ChunkError> {
    let body = blobs
        .body(&c.sha256, offset, len)
        .await?
        .ok_or(ChunkError::Missing)?;
    let bytes = match body {
        BlobBody::Bytes(b) => b,
        BlobBody::Stream(r) => {
            let mut v = Vec::with_capacity(len as usize);
            r.take(len).read_to_end(&mut v).await?;
            Bytes::from(v)
        }
    };
    if bytes.len() as u64 != len {
        return Err(ChunkError::Short {
            got: bytes.len() as u64,
            want: len,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::blobs::fs::FsBlobStore;

    const MIB: usize = 1 << 20;

    fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(seed | 1) ^ (i >> 11) as u8)
            .collect()
    }

    /// A file of `bytes` cut into chunks of `lengths`, its chunks stored in
    /// a fresh blob store, the chunk holding byte `flip` (if any) stored
    /// with that byte flipped, as bitrot would leave it.
    async fn stored(
        bytes: &[u8],
        lengths: &[usize],
        flip: Option<usize>,
    ) -> (tempfile::TempDir, Arc<dyn BlobStore>, Arc<File>) {
        let dir = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(dir.path()).unwrap());
        let entry = EntryData::file_of(bytes, lengths);
        let file = File::of("model.safetensors", &entry).unwrap();
        for c in &file.chunks {
            let at = c.offset as usize;
            let mut chunk = bytes[at..at + c.length as usize].to_vec();
            if let Some(i) = flip.filter(|i| (at..at + chunk.len()).contains(i)) {
                chunk[i - at] ^= 0x40;
            }
            blobs.put(&c.sha256, Bytes::from(chunk)).await.unwrap();
        }
        (dir, blobs, Arc::new(file))
    }

    /// The bytes of `range` that reached the reader before the body ended,
    /// and the error it ended with, if any.
    async fn read(
        blobs: &Arc<dyn BlobStore>,
        file: &Arc<File>,
        range: Range<u64>,
    ) -> Result<(Vec<u8>, Option<FileError>), FileError> {
        let mut body = open(Arc::clone(blobs), Arc::clone(file), range).await?;
        let mut out = Vec::new();
        while let Some(part) = body.next().await {
            match part {
                Ok(b) => out.extend_from_slice(&b),
                Err(e) => return Ok((out, Some(e))),
            }
        }
        Ok((out, None))
    }

    #[test]
    fn the_part_of_a_piece_in_a_range() {
        let m = PIECE;
        assert_eq!(within(0, MIB, &(0..1)), 0..1);
        assert_eq!(within(m, MIB, &(0..3 * m)), 0..MIB);
        assert_eq!(within(m, MIB, &(m + 5..m + 7)), 5..7);
        assert_eq!(within(m, MIB, &(m - 5..m + 7)), 0..7);
        assert_eq!(within(m, 10, &(m + 3..5 * m)), 3..10);
        assert_eq!(within(2 * m, MIB, &(0..m)), 0..0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn any_range_reads_back_exactly() {
        // Cuts at 700,000 and 2,200,000: piece 0 straddles a cut, piece 1
        // lies in one chunk, piece 2 takes bytes of two.
        let len = 3 * MIB + 4321;
        let d = data(len, 3);
        let (_dir, blobs, file) = stored(&d, &[700_000, 1_500_000, len - 2_200_000], None).await;
        for (s, e) in [
            (0, 1),
            (0, len),
            (MIB - 1, MIB + 1),
            (len - 1, len),
            (2 * MIB, 3 * MIB),
            (699_999, 2_200_001),
            (3 * MIB, len),
            (123, 123),
        ] {
            let (got, err) = read(&blobs, &file, s as u64..e as u64).await.unwrap();
            assert!(err.is_none(), "{s}..{e}: {err:?}");
            assert!(got == d[s..e], "{s}..{e}: wrong bytes");
        }
        // A file of one piece, checked against its BLAKE3.
        let small = data(5000, 9);
        let (_dir, blobs, file) = stored(&small, &[1000, 4000], None).await;
        let (got, err) = read(&blobs, &file, 999..1001).await.unwrap();
        assert!(err.is_none() && got == small[999..1001]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_range_past_the_end_is_refused() {
        let d = data(10, 1);
        let (_dir, blobs, file) = stored(&d, &[], None).await;
        // A range that ends before it starts, as a caller could compute.
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..4;
        for r in [0..11, 10..12, backwards] {
            let e = read(&blobs, &file, r.clone()).await.unwrap_err();
            assert!(
                matches!(e, FileError::RangeNotSatisfiable { .. }),
                "{r:?}: {e}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_damaged_chunk_gives_an_error_never_its_bytes() {
        let len = 3 * MIB + 4321;
        let d = data(len, 5);
        // The flipped byte lies in piece 3, in the last chunk, which piece
        // 2 shares.
        let flip = 3 * MIB + 100;
        let (_dir, blobs, file) =
            stored(&d, &[700_000, 1_500_000, len - 2_200_000], Some(flip)).await;
        // Pieces 0 to 2 verify, the damaged chunk's bytes in piece 2 too.
        let (got, err) = read(&blobs, &file, 0..3 * MIB as u64).await.unwrap();
        assert!(err.is_none() && got == d[..3 * MIB]);
        // A range starting in the damaged piece fails before any byte.
        let e = read(&blobs, &file, flip as u64..flip as u64 + 1)
            .await
            .unwrap_err();
        assert!(
            matches!(e, FileError::Corrupt { start, .. } if start == 3 * PIECE),
            "{e}"
        );
        // A range reaching it from a good piece: the good pieces, then the
        // error; no byte of the damaged piece.
        let (got, err) = read(&blobs, &file, 10..len as u64).await.unwrap();
        assert!(matches!(err, Some(FileError::Corrupt { .. })), "{err:?}");
        assert!(
            got == d[10..3 * MIB],
            "{} bytes before the error",
            got.len()
        );
        // Past the first span of pieces read together: the pieces before
        // the damaged one, whole, then the error.
        let len = 9 * MIB + 7;
        let d = data(len, 6);
        let flip = 6 * MIB + 1;
        let (_dir, blobs, file) = stored(
            &d,
            &[3 * MIB + 5, 2 * MIB, MIB, len - 6 * MIB - 5],
            Some(flip),
        )
        .await;
        let (got, err) = read(&blobs, &file, 5..len as u64).await.unwrap();
        assert!(
            matches!(err, Some(FileError::Corrupt { start, .. }) if start == 6 * PIECE),
            "{err:?}"
        );
        assert!(got == d[5..6 * MIB], "{} bytes before the error", got.len());
        // A file of one piece: checked against its BLAKE3.
        let small = data(5000, 9);
        let (_dir, blobs, file) = stored(&small, &[1000, 4000], Some(4999)).await;
        let e = read(&blobs, &file, 0..10).await.unwrap_err();
        assert!(matches!(e, FileError::Corrupt { .. }), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_or_short_chunk_is_an_error() {
        let d = data(2 * MIB + 1, 7);
        let (dir, blobs, file) = stored(&d, &[MIB, MIB + 1], None).await;
        let second = file.chunks[1].sha256;
        // Short: a store that lost the chunk's tail.
        let path = dir
            .path()
            .join("blobs/sha256")
            .join(&second.hex()[..2])
            .join(second.hex());
        std::fs::write(&path, &d[MIB..2 * MIB]).unwrap();
        let e = read(&blobs, &file, 2 * PIECE..2 * PIECE + 1)
            .await
            .unwrap_err();
        assert!(matches!(e, FileError::Corrupt { .. }), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = read(&blobs, &file, MIB as u64..MIB as u64 + 1)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not stored"), "{e}");
        // The first piece needs only the first chunk.
        let (got, err) = read(&blobs, &file, 0..MIB as u64).await.unwrap();
        assert!(err.is_none() && got == d[..MIB]);
    }

    #[test]
    fn a_format_1_file_larger_than_a_piece_is_refused_not_served_unchecked() {
        use sealvol_spec::tree::{encode_entries, Entry};
        use sealvol_spec::TreeFormat;
        let file_entry = |path: &str, len: usize| Entry {
            path: path.into(),
            mode: 0o644,
            data: EntryData::file_of(&data(len, 1), &[]),
        };
        let v2 = TreeIndex::new(
            Default::default(),
            vec![file_entry("big", MIB + 1), file_entry("small", MIB)],
        )
        .unwrap();
        let bytes = encode_entries(TreeFormat::V1, v2.params(), v2.entries(), &|_, _| {
            B3Digest::of(b"a per-chunk hash no reader checks any more")
        });
        let v1 = TreeIndex::decode(&bytes).unwrap();
        assert!(!v1.is_verifiable());
        assert!(matches!(file(&v1, "big"), Err(FileError::Unverifiable(_))));
        // One piece: checked against its BLAKE3, which the digest covers.
        assert_eq!(file(&v1, "small").unwrap().size, MIB as u64);
        assert_eq!(file(&v2, "big").unwrap().size, MIB as u64 + 1);
    }

    #[test]
    fn directories_and_symlinks_are_not_files() {
        use sealvol_spec::tree::Entry;
        let tree = TreeIndex::new(
            Default::default(),
            vec![
                Entry {
                    path: "d".into(),
                    mode: 0o755,
                    data: EntryData::Dir,
                },
                Entry {
                    path: "d/f".into(),
                    mode: 0o644,
                    data: EntryData::file_of(b"hi", &[]),
                },
                Entry {
                    path: "l".into(),
                    mode: 0o777,
                    data: EntryData::Symlink {
                        target: "d/f".into(),
                    },
                },
            ],
        )
        .unwrap();
        assert_eq!(file(&tree, "d/f").unwrap().size, 2);
        for p in ["d", "l", "nope", "d/f/g"] {
            assert!(
                matches!(file(&tree, p), Err(FileError::PathUnknown(_))),
                "{p}"
            );
        }
    }
}
