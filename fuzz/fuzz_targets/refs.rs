//! Refs and digests as a user or a client types them: parsing never
//! panics, and what parses prints as a string that parses to the same
//! value and prints the same again (SPEC.md §1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealvol_spec::{B3Digest, DigestSelector, Sha256Digest, Tag, VolumeRef};

fn round_trip<T>(s: &str)
where
    T: std::str::FromStr + std::fmt::Display + PartialEq + std::fmt::Debug,
{
    if let Ok(v) = s.parse::<T>() {
        let printed = v.to_string();
        let again = printed
            .parse::<T>()
            .unwrap_or_else(|_| panic!("{s:?} printed {printed:?}, which does not parse"));
        assert_eq!(again, v, "{s:?} printed {printed:?}");
        assert_eq!(again.to_string(), printed);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    round_trip::<VolumeRef>(s);
    round_trip::<B3Digest>(s);
    round_trip::<Sha256Digest>(s);
    round_trip::<Tag>(s);
    let _ = Tag::parse_user(s);
    round_trip::<DigestSelector>(s);
});
