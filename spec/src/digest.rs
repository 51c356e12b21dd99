//! Digests: the `b3:` version digest, the `sha256:` OCI blob digest, and the
//! digest selectors users type in refs (SPEC.md §1.3).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Shortest digest prefix a ref may use (SPEC.md §1.3).
pub const MIN_PREFIX_HEX: usize = 12;

/// Why a digest string was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DigestError {
    #[error("digest {0:?} is not `b3:<64 hex>`")]
    NotB3(String),
    #[error("digest {0:?} is not `sha256:<64 hex>`")]
    NotSha256(String),
    #[error(
        "digest {0:?} is not valid: use b3:<hex>, bare hex (at least 12 lower-case hex digits) or sha256:<64 hex>"
    )]
    InvalidSelector(String),
    #[error("digest prefix {prefix} matches {count} versions; give more hex digits")]
    Ambiguous { prefix: String, count: usize },
    #[error("no version matches digest {0}")]
    NoMatch(String),
}

fn parse_hex32(hex_str: &str) -> Option<[u8; 32]> {
    if hex_str.len() != 64 || !is_lower_hex(hex_str) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_str, &mut out).ok()?;
    Some(out)
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

macro_rules! digest_type {
    ($name:ident, $prefix:literal, $err:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// The algorithm prefix, including the colon.
            pub const PREFIX: &'static str = $prefix;

            /// The 64 lower-case hex digits, without the algorithm prefix.
            pub fn hex(&self) -> String {
                hex::encode(self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = DigestError;
            fn from_str(s: &str) -> Result<Self, DigestError> {
                s.strip_prefix($prefix)
                    .and_then(parse_hex32)
                    .map($name)
                    .ok_or_else(|| DigestError::$err(s.to_string()))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

digest_type!(
    B3Digest,
    "b3:",
    NotB3,
    "A BLAKE3-256 digest, written `b3:<64 hex>`: version digests, file and chunk hashes."
);
digest_type!(
    Sha256Digest,
    "sha256:",
    NotSha256,
    "A SHA-256 digest, written `sha256:<64 hex>`: the OCI address of a blob or manifest."
);

impl B3Digest {
    /// BLAKE3 of `data`.
    pub fn of(data: &[u8]) -> Self {
        B3Digest(*blake3::hash(data).as_bytes())
    }
}

impl From<blake3::Hash> for B3Digest {
    fn from(h: blake3::Hash) -> Self {
        B3Digest(*h.as_bytes())
    }
}

impl Sha256Digest {
    /// SHA-256 of `data`.
    pub fn of(data: &[u8]) -> Self {
        use sha2::Digest as _;
        Sha256Digest(sha2::Sha256::digest(data).into())
    }
}

/// What a ref's `@…` part selects (SPEC.md §1.3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DigestSelector {
    /// A full version digest (`b3:<64 hex>` or 64 bare hex digits).
    B3(B3Digest),
    /// 12 to 63 lower-case hex digits of a version digest (`b3:` optional).
    B3Prefix(String),
    /// The OCI digest of the version's top-level manifest.
    Sha256(Sha256Digest),
}

impl DigestSelector {
    /// Picks the one candidate this selector names. A full digest or a
    /// prefix that matches nothing is [`DigestError::NoMatch`]; a prefix that
    /// matches more than one version is [`DigestError::Ambiguous`].
    pub fn resolve<'a, I>(&self, candidates: I) -> Result<B3Digest, DigestError>
    where
        I: IntoIterator<Item = &'a B3Digest>,
    {
        let mut found: Vec<B3Digest> = match self {
            DigestSelector::B3(d) => candidates
                .into_iter()
                .filter(|c| *c == d)
                .copied()
                .collect(),
            DigestSelector::B3Prefix(p) => candidates
                .into_iter()
                .filter(|c| c.hex().starts_with(p.as_str()))
                .copied()
                .collect(),
            DigestSelector::Sha256(_) => Vec::new(),
        };
        found.sort();
        found.dedup();
        match found.len() {
            1 => Ok(found[0]),
            0 => Err(DigestError::NoMatch(self.to_string())),
            count => Err(DigestError::Ambiguous {
                prefix: self.to_string(),
                count,
            }),
        }
    }
}

impl fmt::Display for DigestSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DigestSelector::B3(d) => d.fmt(f),
            DigestSelector::B3Prefix(p) => write!(f, "b3:{p}"),
            DigestSelector::Sha256(d) => d.fmt(f),
        }
    }
}

impl FromStr for DigestSelector {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, DigestError> {
        if s.starts_with(Sha256Digest::PREFIX) {
            return s.parse().map(DigestSelector::Sha256);
        }
        let hex_part = s.strip_prefix(B3Digest::PREFIX).unwrap_or(s);
        let invalid = || DigestError::InvalidSelector(s.to_string());
        if hex_part.len() < MIN_PREFIX_HEX || hex_part.len() > 64 || !is_lower_hex(hex_part) {
            return Err(invalid());
        }
        if hex_part.len() == 64 {
            parse_hex32(hex_part)
                .map(|b| DigestSelector::B3(B3Digest(b)))
                .ok_or_else(invalid)
        } else {
            Ok(DigestSelector::B3Prefix(hex_part.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b3_round_trip_and_rejections() {
        let d = B3Digest::of(b"hello");
        assert_eq!(d.to_string().parse::<B3Digest>().unwrap(), d);
        assert!("b3:ABC".parse::<B3Digest>().is_err());
        assert!(format!("b3:{}", d.hex().to_uppercase())
            .parse::<B3Digest>()
            .is_err());
        assert!(format!("sha256:{}", d.hex()).parse::<B3Digest>().is_err());
    }

    #[test]
    fn selector_forms() {
        let d = B3Digest::of(b"x");
        assert_eq!(
            d.hex().parse::<DigestSelector>().unwrap(),
            DigestSelector::B3(d)
        );
        assert_eq!(
            d.hex()[..12].parse::<DigestSelector>().unwrap(),
            DigestSelector::B3Prefix(d.hex()[..12].to_string())
        );
        assert!(d.hex()[..11].parse::<DigestSelector>().is_err());
        let s = Sha256Digest::of(b"x");
        assert_eq!(
            s.to_string().parse::<DigestSelector>().unwrap(),
            DigestSelector::Sha256(s)
        );
    }

    #[test]
    fn prefix_resolution_is_exact_or_errors() {
        let a = B3Digest([0xab; 32]);
        let mut b_bytes = [0xab; 32];
        b_bytes[10] = 0;
        let b = B3Digest(b_bytes);
        let sel: DigestSelector = "abababababab".parse().unwrap();
        assert!(matches!(
            sel.resolve([&a, &b]),
            Err(DigestError::Ambiguous { count: 2, .. })
        ));
        let sel: DigestSelector = a.hex()[..40].parse().unwrap();
        assert_eq!(sel.resolve([&a, &b]).unwrap(), a);
        let sel: DigestSelector = "cdcdcdcdcdcd".parse().unwrap();
        assert!(matches!(
            sel.resolve([&a, &b]),
            Err(DigestError::NoMatch(_))
        ));
    }
}
