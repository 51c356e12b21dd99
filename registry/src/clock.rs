//! The registry's idea of now, in Unix seconds. Expiry, retention, grace
//! periods, push claims and upload sessions all read this one clock, so
//! tests can move it: when `registry.toml` says `test_clock = true` and
//! `SEALVOL_TEST_CLOCK_FILE` is set, the file's integer content (seconds,
//! possibly negative; missing or empty means 0) is added to the system
//! time at every reading. Without `test_clock` the variable is ignored:
//! anyone who can set a production registry's environment would
//! otherwise be able to expire its tags and versions. In-process tests use
//! [`Clock::advance`].

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
    /// The system clock, shifted by `$SEALVOL_TEST_CLOCK_FILE` when set
    /// and `test_clock` (the configuration's) allows it.
    pub fn from_config(test_clock: bool) -> Clock {
        let file = std::env::var_os(CLOCK_FILE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        if file.is_some() && !test_clock {
            tracing::warn!(
                "ignoring {CLOCK_FILE_ENV}: set test_clock = true in registry.toml to let tests move this registry's clock"
            );
        }
        Clock {
            offset: AtomicI64::new(0),
            file: file.filter(|_| test_clock),
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

/// RFC 3339 UTC, seconds precision.
pub fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
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
