//! Reused chunk buffers. A chunk is read into a buffer of up to 16 MiB; a
//! fresh allocation that large comes from `mmap`, so every page of it is
//! faulted in and zeroed again for each chunk (a tenth of a pull's CPU,
//! measured with `perf`). Buffers handed back here are reused instead. The
//! pool keeps at most [`POOL_BYTES`], so it costs a bounded amount of
//! memory however many chunks pass.

use std::sync::Mutex;

/// What the pool keeps at most: enough for the default 8 parallel
/// downloads of 2–4 MiB chunks, twice over.
const POOL_BYTES: usize = 64 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer with room for `capacity` bytes, reused when the pool has
/// one: the smallest that fits, so that a 1 MiB piece does not take the
/// buffer an 8 MiB chunk needs next.
pub fn take(capacity: usize) -> Vec<u8> {
    let reused = {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let found = (pool.iter().enumerate())
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        found.map(|i| pool.swap_remove(i))
    };
    match reused {
        Some(mut b) => {
            b.clear();
            b
        }
        None => Vec::with_capacity(capacity),
    }
}

/// Hands a buffer back for [`take`] to reuse; dropped when the pool is full.
pub fn give(buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let held: usize = pool.iter().map(Vec::capacity).sum();
    if held + buf.capacity() <= POOL_BYTES {
        pool.push(buf);
    }
}

/// `data` copied into a pooled buffer, as [`bytes::Bytes`] that hand the
/// buffer back when the last clone is dropped (an upload's retries clone
/// it).
pub fn pooled_bytes(data: &[u8]) -> bytes::Bytes {
    let mut buf = take(data.len());
    buf.extend_from_slice(data);
    into_bytes(buf)
}

/// `buf` as [`bytes::Bytes`] that hand it back to the pool when the last
/// clone is dropped: for chunks and pieces a mount keeps in memory a while,
/// whose buffers would otherwise be unmapped on eviction and faulted in
/// again for the next fetch.
pub fn into_bytes(buf: Vec<u8>) -> bytes::Bytes {
    bytes::Bytes::from_owner(Pooled(buf))
}

struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_and_bounds() {
        let mut b = take(1 << 20);
        b.extend_from_slice(&[7; 100]);
        let ptr = b.as_ptr();
        give(b);
        let again = take(1 << 20);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), ptr, "the buffer handed back is reused");
        give(again);
        // More than the bound is not kept.
        for _ in 0..100 {
            give(Vec::with_capacity(4 << 20));
        }
        let held: usize = POOL.lock().unwrap().iter().map(Vec::capacity).sum();
        assert!(held <= POOL_BYTES, "{held}");
    }
}
