//! An expiry as a user types it after `--expires-at` (`sealvol update`,
//! `sealvol tag set`, `sealvol admin`): a time, a duration from now, or
//! `never`. The commands that take one all parse it here, so none imports
//! another for it.

use std::time::SystemTime;

use anyhow::bail;

/// An expiry as `--expires-at` takes it: a time, a duration from now, or
/// `never` (`None`).
pub fn parse_expiry_or_never(s: &str) -> anyhow::Result<Option<SystemTime>> {
    if s.trim() == "never" {
        return Ok(None);
    }
    Ok(Some(parse_expiry(s, SystemTime::now())?))
}

/// An expiry a user typed: an RFC 3339 UTC time (`2026-12-09T00:00:00Z`)
/// or a duration from `now` (`24h`, `7d`, `1h 30m`). A time in the past is
/// refused: it would expire at the next garbage collection.
pub fn parse_expiry(s: &str, now: SystemTime) -> anyhow::Result<SystemTime> {
    let s = s.trim();
    let t = if let Ok(t) = humantime::parse_rfc3339(s) {
        t
    } else if let Ok(d) = humantime::parse_duration(s) {
        match now.checked_add(d) {
            Some(t) => t,
            None => bail!("expiry {s:?} is too far away"),
        }
    } else {
        bail!(
            "invalid expiry {s:?}: give an RFC 3339 UTC time (2026-12-09T00:00:00Z) or a duration from now (24h, 7d)"
        );
    };
    if t < now {
        bail!("expiry {s:?} is in the past; give a later time or a duration from now (24h, 7d)");
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_are_times_or_durations_from_now() {
        let now = humantime::parse_rfc3339("2026-12-02T18:40:00Z").unwrap();
        let at = |s: &str| {
            parse_expiry(s, now).map(|t| humantime::format_rfc3339_seconds(t).to_string())
        };
        assert_eq!(at("2026-12-09T00:00:00Z").unwrap(), "2026-12-09T00:00:00Z");
        assert_eq!(at("24h").unwrap(), "2026-12-03T18:40:00Z");
        assert_eq!(at("7d").unwrap(), "2026-12-09T18:40:00Z");
        assert_eq!(at(" 1h 30m ").unwrap(), "2026-12-02T20:10:00Z");
        for bad in ["tomorrow", "2026-12-09", "2026-12-09T00:00:00+01:00", ""] {
            let e = at(bad).unwrap_err().to_string();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
        let e = at("2020-01-01T00:00:00Z").unwrap_err();
        assert!(e.to_string().contains("in the past"), "{e}");
    }

    #[test]
    fn never_clears_and_anything_else_must_parse() {
        assert_eq!(parse_expiry_or_never("never").unwrap(), None);
        assert!(parse_expiry_or_never("7d").unwrap().is_some());
        let e = parse_expiry_or_never("soon").unwrap_err().to_string();
        assert!(e.contains("RFC 3339") && !e.contains('\n'), "{e}");
    }
}
