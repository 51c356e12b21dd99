//! What the benchmark drivers under `tests/examples/` share: cold caches
//! before a run, and medians.

use std::path::Path;

/// Cold caches: the page cache dropped, the snapshotter's chunk cache
/// (under `snap_root`) emptied. Only its files go: the fuse manager opened
/// the cache once and keeps using its folders (`chunks/tmp` for whole-file
/// copies, …). Needs root.
pub fn cold(snap_root: &Path) -> std::io::Result<()> {
    fn remove_files(dir: &Path) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                remove_files(&e.path())?;
            } else {
                std::fs::remove_file(e.path())?;
            }
        }
        Ok(())
    }
    let cache = snap_root.join("cache");
    if cache.exists() {
        remove_files(&cache)?;
    }
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
}

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
