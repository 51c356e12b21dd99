//! The registry's idea of now, in Unix seconds. Expiry, retention, grace
//! periods and push claims all read this one clock, so tests can move it:
//! with `SEALVOL_TEST_CLOCK_FILE` set, the file's integer content (seconds,
//! possibly negative; missing or empty means 0) is added to the system
//! time at every reading. In-process tests use [`Clock::advance`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Names the file whose content shifts the clock (tests only).
pub const CLOCK_FILE_ENV: &str = "SEALVOL_TEST_CLOCK_FILE";

#[derive(Debug, Default)]
pub struct Clock {
    offset: AtomicI64,
    file: Option<PathBuf>,
}

impl Clock {
    /// The system clock, shifted by `$SEALVOL_TEST_CLOCK_FILE` when set.
    pub fn from_env() -> Clock {
        Clock {
            offset: AtomicI64::new(0),
            file: std::env::var_os(CLOCK_FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }

    pub fn now(&self) -> u64 {
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()) as i64;
        let from_file = self
            .file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(0);
        (system + self.offset.load(Ordering::Relaxed) + from_file).max(0) as u64
    }

    /// Moves this clock by `secs`.
    pub fn advance(&self, secs: i64) {
        self.offset.fetch_add(secs, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advancing_and_the_clock_file_shift_now() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("offset");
        let clock = Clock {
            offset: AtomicI64::new(0),
            file: Some(file.clone()),
        };
        let base = clock.now();
        clock.advance(100);
        assert!((base + 100..base + 102).contains(&clock.now()));
        std::fs::write(&file, "86400\n").unwrap();
        assert!((base + 86_500..base + 86_502).contains(&clock.now()));
    }
}
