//! `[signatures]` in `snapshotter.toml`: which keys must have signed a
//! version (SPEC.md §5.9) before the snapshotter mounts it.
//!
//! ```toml
//! [signatures]
//! required = true
//! [[signatures.trust]]
//! repositories = ["weights/**", "team/*"]
//! keys = ["/etc/sealvol/keys/release.pub"]
//! ```
//!
//! A version of repository `R` (`namespace/volume`) must be signed by one
//! of the keys of every rule whose globs match `R` (their union). Where no
//! rule matches, `required = true` refuses it, and otherwise it is mounted
//! unchecked. Globs are the registry's `[[auth.access]]` ones: `*` stays
//! within one path segment, `**` crosses them. Keys are read once, when
//! the daemon starts.

use std::path::PathBuf;

use globset::{GlobBuilder, GlobMatcher};
use sealvol_client::signature::{KeyError, TrustedKey};

/// The `[signatures]` table as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SignaturesConfig {
    /// Refuse a version no trusted key signed, including one of a
    /// repository no rule matches.
    pub required: bool,
    /// `[[signatures.trust]]`: the keys trusted for some repositories.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trust: Vec<TrustRule>,
}

/// One `[[signatures.trust]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrustRule {
    /// Globs over the repository path (`namespace/volume`).
    pub repositories: Vec<String>,
    /// PEM public keys (SPKI; ECDSA P-256/P-384 or Ed25519).
    pub keys: Vec<PathBuf>,
}

/// Why `[signatures]` cannot be used: one line, naming the glob or file
/// (no `source`, so that a printed chain does not repeat it).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("[[signatures.trust]] repositories glob {pattern:?}: {message}")]
    Pattern { pattern: String, message: String },
    #[error("[[signatures.trust]] key {0}")]
    Key(KeyError),
    #[error("[[signatures.trust]] entry {index} names no {what}")]
    Empty { index: usize, what: &'static str },
}

/// A version that may not be mounted because no key is trusted for its
/// repository while signatures are required.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no trusted key for repository {repository} in snapshotter.toml [signatures] (required = true)"
)]
pub struct NoTrustedKey {
    pub repository: String,
}

/// `[signatures]` with its globs compiled and its keys read.
#[derive(Clone, Debug, Default)]
pub struct SignaturePolicy {
    required: bool,
    /// Each rule's globs and the indexes of its keys in `keys`.
    rules: Vec<(Vec<GlobMatcher>, Vec<usize>)>,
    /// Every key, once per file.
    keys: Vec<TrustedKey>,
}

impl SignaturePolicy {
    /// Compiles the globs and reads every key file; the first glob or key
    /// that cannot be used is the error.
    pub fn load(config: &SignaturesConfig) -> Result<SignaturePolicy, PolicyError> {
        let mut paths: Vec<PathBuf> = Vec::new();
        let mut keys = Vec::new();
        let mut rules = Vec::with_capacity(config.trust.len());
        for (index, rule) in config.trust.iter().enumerate() {
            if rule.repositories.is_empty() {
                let what = "repositories";
                return Err(PolicyError::Empty { index, what });
            }
            if rule.keys.is_empty() {
                let what = "keys";
                return Err(PolicyError::Empty { index, what });
            }
            let mut globs = Vec::with_capacity(rule.repositories.len());
            for pattern in &rule.repositories {
                let glob = GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| PolicyError::Pattern {
                        pattern: pattern.clone(),
                        message: e.kind().to_string(),
                    })?;
                globs.push(glob.compile_matcher());
            }
            let mut indexes = Vec::with_capacity(rule.keys.len());
            for path in &rule.keys {
                let i = match paths.iter().position(|p| p == path) {
                    Some(i) => i,
                    None => {
                        keys.push(TrustedKey::load(path).map_err(PolicyError::Key)?);
                        paths.push(path.clone());
                        keys.len() - 1
                    }
                };
                indexes.push(i);
            }
            rules.push((globs, indexes));
        }
        Ok(SignaturePolicy {
            required: config.required,
            rules,
            keys,
        })
    }

    /// The keys one of which must have signed a version of `repository`
    /// (the union over the rules matching it, each key once, in the order
    /// of the config); empty when it may be mounted unsigned.
    pub fn keys_for(&self, repository: &str) -> Result<Vec<TrustedKey>, NoTrustedKey> {
        let mut picked: Vec<usize> = Vec::new();
        for (globs, indexes) in &self.rules {
            if globs.iter().any(|g| g.is_match(repository)) {
                for &i in indexes {
                    if !picked.contains(&i) {
                        picked.push(i);
                    }
                }
            }
        }
        if picked.is_empty() && self.required {
            return Err(NoTrustedKey {
                repository: repository.to_string(),
            });
        }
        picked.sort_unstable();
        Ok(picked.into_iter().map(|i| self.keys[i].clone()).collect())
    }

    /// Whether any version is checked at all.
    pub fn is_off(&self) -> bool {
        !self.required && self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three public keys in `dir` (P-256, P-384, Ed25519, made once with
    /// openssl).
    fn keys(dir: &std::path::Path) -> [PathBuf; 3] {
        const P256: &str = "-----BEGIN PUBLIC KEY-----\n\
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEQIMRo45GaiHPzK1iecoySnXWlSvm\n\
7wg2ZfczniHKzTzhOXCo2VGckg9tdskiXcjHCZdsL3Q6NC7O4CezhAdT0w==\n\
-----END PUBLIC KEY-----\n";
        const P384: &str = "-----BEGIN PUBLIC KEY-----\n\
MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAEKeKjP7Kde4vADUDRCU5huQ+/qUO+WUh7\n\
yKNMb3ixKjnl3pW7nRmIfIcmbzu0V9JRTGiSYdU/+ZD4dPnKnrS1x7wW6foH5sHk\n\
syxwFet0H1pyLlRxFiqlUUC2DJqwY0hj\n\
-----END PUBLIC KEY-----\n";
        const ED25519: &str = "-----BEGIN PUBLIC KEY-----\n\
MCowBQYDK2VwAyEAKNzdoXzUAfmHIUZDOQ5EGUVfzKXE5Xr8Dkl3x3wqvyM=\n\
-----END PUBLIC KEY-----\n";
        let mut out = [PathBuf::new(), PathBuf::new(), PathBuf::new()];
        for (i, (name, pem)) in [("a.pub", P256), ("b.pub", P384), ("c.pub", ED25519)]
            .into_iter()
            .enumerate()
        {
            out[i] = dir.join(name);
            std::fs::write(&out[i], pem).unwrap();
        }
        out
    }

    fn rule(repositories: &[&str], keys: &[&PathBuf]) -> TrustRule {
        TrustRule {
            repositories: repositories.iter().map(|r| r.to_string()).collect(),
            keys: keys.iter().map(|k| k.to_path_buf()).collect(),
        }
    }

    fn sources(keys: Vec<TrustedKey>) -> Vec<String> {
        keys.into_iter().map(|k| k.source).collect()
    }

    #[test]
    fn globs_pick_the_union_of_the_matching_rules_keys() {
        let dir = tempfile::tempdir().unwrap();
        let [a, b, c] = keys(dir.path());
        let policy = SignaturePolicy::load(&SignaturesConfig {
            required: false,
            trust: vec![
                rule(&["weights/**", "team/*"], &[&a]),
                rule(&["team/*"], &[&b, &a]),
                rule(&["*/llama"], &[&c]),
            ],
        })
        .unwrap();
        let s = |p: &std::path::Path| p.display().to_string();
        // `**` crosses segments; `*` does not.
        assert_eq!(sources(policy.keys_for("weights/vol").unwrap()), [s(&a)]);
        assert_eq!(sources(policy.keys_for("weights/a/b/c").unwrap()), [s(&a)]);
        assert_eq!(
            sources(policy.keys_for("team/vol").unwrap()),
            [s(&a), s(&b)]
        );
        assert!(policy.keys_for("team/a/vol").unwrap().is_empty());
        assert_eq!(
            sources(policy.keys_for("weights/llama").unwrap()),
            [s(&a), s(&c)]
        );
        // Not required: a repository no rule matches is not checked.
        assert!(policy.keys_for("other/vol").unwrap().is_empty());
        assert!(policy.keys_for("weightsx/vol").unwrap().is_empty());
        assert!(!policy.is_off());
    }

    #[test]
    fn required_refuses_a_repository_no_rule_matches() {
        let dir = tempfile::tempdir().unwrap();
        let [a, ..] = keys(dir.path());
        let policy = SignaturePolicy::load(&SignaturesConfig {
            required: true,
            trust: vec![rule(&["weights/**"], &[&a])],
        })
        .unwrap();
        assert_eq!(policy.keys_for("weights/vol").unwrap().len(), 1);
        let e = policy.keys_for("team/vol").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no trusted key for repository team/vol in snapshotter.toml [signatures] (required = true)"
        );
        // Required with no rule at all: nothing may be mounted.
        let none = SignaturePolicy::load(&SignaturesConfig {
            required: true,
            trust: vec![],
        })
        .unwrap();
        assert!(none.keys_for("weights/vol").is_err());
        assert!(!none.is_off());
    }

    #[test]
    fn no_table_checks_nothing() {
        let policy = SignaturePolicy::load(&SignaturesConfig::default()).unwrap();
        assert!(policy.is_off());
        assert!(policy.keys_for("weights/vol").unwrap().is_empty());
    }

    #[test]
    fn a_bad_key_or_glob_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let [a, ..] = keys(dir.path());
        let missing = dir.path().join("missing.pub");
        let e = SignaturePolicy::load(&SignaturesConfig {
            required: true,
            trust: vec![rule(&["weights/**"], &[&a, &missing])],
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with(&format!("[[signatures.trust]] key {}: ", missing.display())),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");

        let private = dir.path().join("private.pem");
        std::fs::write(
            &private,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = SignaturePolicy::load(&SignaturesConfig {
            required: false,
            trust: vec![rule(&["weights/**"], &[&private])],
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&private.display().to_string()) && e.contains("not a PEM public key"),
            "{e}"
        );

        let e = SignaturePolicy::load(&SignaturesConfig {
            required: false,
            trust: vec![rule(&["weights/[x"], &[&a])],
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"weights/[x\""), "{e}");

        let e = SignaturePolicy::load(&SignaturesConfig {
            required: false,
            trust: vec![rule(&["weights/**"], &[])],
        })
        .unwrap_err()
        .to_string();
        assert_eq!(e, "[[signatures.trust]] entry 0 names no keys");
    }

    #[test]
    fn the_table_parses_from_snapshotter_toml_and_refuses_unknown_keys() {
        let c: crate::containerd::Config = toml::from_str(
            "[signatures]\nrequired = true\n[[signatures.trust]]\n\
             repositories = [\"weights/**\", \"team/*\"]\nkeys = [\"/etc/sealvol/keys/release.pub\"]\n",
        )
        .unwrap();
        assert_eq!(
            c.signatures,
            SignaturesConfig {
                required: true,
                trust: vec![TrustRule {
                    repositories: vec!["weights/**".into(), "team/*".into()],
                    keys: vec!["/etc/sealvol/keys/release.pub".into()],
                }],
            }
        );
        // The fuse manager's copy of the config reads back the same.
        let again: crate::containerd::Config =
            toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again.signatures, c.signatures);
        for bad in [
            "[signatures]\nrequire = true\n",
            "[[signatures.trust]]\nrepositories = [\"a/*\"]\nkeys = []\nkey = \"x\"\n",
        ] {
            let e = toml::from_str::<crate::containerd::Config>(bad).unwrap_err();
            assert!(e.to_string().contains("unknown field"), "{bad}: {e}");
        }
    }
}
