//! Chunking parameters and the cut-point function (SPEC.md §4): FastCDC as
//! published in 2020, normalization level 1, the published gear table.
//!
//! Cut points depend only on the bytes of one file and the three sizes, so a
//! streaming chunker that calls [`Cutter::cut`] on a window of at least
//! `max` bytes (or on the file's tail) finds the same chunks as one that
//! holds the whole file.

use fastcdc::v2020::{self, Normalization};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Minimum, average and maximum chunk size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkingParams {
    pub min: u32,
    pub avg: u32,
    pub max: u32,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("chunking parameters min={min} avg={avg} max={max} are invalid: need even sizes with 64 <= min <= 1 MiB, 256 <= avg <= 4 MiB, 1 KiB <= max <= 16 MiB and min <= avg <= max")]
pub struct ChunkingError {
    pub min: u32,
    pub avg: u32,
    pub max: u32,
}

/// The parameters of new volumes (SPEC.md §4.1): min 512 KiB, avg 2 MiB,
/// max 8 MiB. A new version of an existing volume keeps the parameters of
/// its head instead, so that unchanged regions give the same chunks.
impl Default for ChunkingParams {
    fn default() -> Self {
        ChunkingParams {
            min: 512 << 10,
            avg: 2 << 20,
            max: 8 << 20,
        }
    }
}

impl ChunkingParams {
    /// The default until December 2026 (min 1 MiB, avg 4 MiB, max 16 MiB):
    /// volumes first published with it keep it (SPEC.md §4.1).
    pub const EARLIER_DEFAULT: ChunkingParams = ChunkingParams {
        min: 1 << 20,
        avg: 4 << 20,
        max: 16 << 20,
    };

    /// Checks the bounds of SPEC.md §4.1 (those of FastCDC 2020).
    pub fn validate(&self) -> Result<(), ChunkingError> {
        let (min, avg, max) = (self.min as usize, self.avg as usize, self.max as usize);
        let ok = (v2020::MINIMUM_MIN..=v2020::MINIMUM_MAX).contains(&min)
            && (v2020::AVERAGE_MIN..=v2020::AVERAGE_MAX).contains(&avg)
            && (v2020::MAXIMUM_MIN..=v2020::MAXIMUM_MAX).contains(&max)
            && min <= avg
            && avg <= max
            && min % 2 == 0
            && avg % 2 == 0
            && max % 2 == 0;
        if ok {
            Ok(())
        } else {
            Err(ChunkingError {
                min: self.min,
                avg: self.avg,
                max: self.max,
            })
        }
    }

    /// A cut-point finder for these parameters.
    pub fn cutter(&self) -> Result<Cutter, ChunkingError> {
        self.validate()?;
        let (mask_s, mask_l) = v2020::select_masks(self.avg as usize, Normalization::Level1);
        Ok(Cutter {
            params: *self,
            mask_s,
            mask_l,
        })
    }
}

/// Finds chunk boundaries; cheap to copy, shared by all threads.
#[derive(Clone, Copy, Debug)]
pub struct Cutter {
    params: ChunkingParams,
    mask_s: u64,
    mask_l: u64,
}

impl Cutter {
    pub fn params(&self) -> ChunkingParams {
        self.params
    }

    /// Length of the chunk that starts at `window[0]`. `window` must hold at
    /// least `max` bytes unless it is the rest of the file.
    pub fn cut(&self, window: &[u8]) -> usize {
        let (_, len) = v2020::cut(
            window,
            self.params.min as usize,
            self.params.avg as usize,
            self.params.max as usize,
            self.mask_s,
            self.mask_l,
            self.mask_s << 1,
            self.mask_l << 1,
        );
        len
    }

    /// All chunk lengths of an in-memory file.
    pub fn chunk_lengths(&self, mut data: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let n = self.cut(data);
            out.push(n);
            data = &data[n..];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bounds_enforced() {
        ChunkingParams::default().validate().unwrap();
        let bad = ChunkingParams {
            min: 3,
            avg: 4096,
            max: 8192,
        };
        assert!(bad.validate().is_err());
        let bad = ChunkingParams {
            min: 8192,
            avg: 4096,
            max: 16384,
        };
        assert!(bad.validate().is_err());
        let bad = ChunkingParams {
            min: 1 << 20,
            avg: 4 << 20,
            max: 32 << 20,
        };
        assert!(bad.validate().is_err());
    }
}
