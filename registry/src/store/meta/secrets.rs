//! Sync secrets at rest and in use (SPEC.md §8.3, §8.4).
//!
//! At rest a value is sealed with XChaCha20-Poly1305 under a key kept in a
//! file outside the database (`secrets_key_file`, made at first start), so
//! a copy of `meta.redb` (a backup, a support bundle) holds no credential;
//! the secret's name is the associated data, so a sealed value moved to
//! another name does not open. In use a secret is bound: to the sources it
//! may be sent to (`for` URIs, compared as [`Scope`]s) and to the
//! destinations whose pushers may use it (`dest` globs). A source's
//! `?endpoint=` override is honoured only when the admin lists it in
//! `sync_endpoints` or the secret's `for` URI names that same endpoint, so
//! neither a stored secret nor the host's own credentials follow a URI to
//! a host its writer picked.
//!
//! Not the HTTP handlers ([`crate::http::api::syncs`]) nor the table
//! ([`crate::store::meta::syncs`]).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sealvol_spec::api;
use sealvol_sync::{NetPolicy, Scope};
use serde::{Deserialize, Serialize};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The key that seals secret values.
#[derive(Clone)]
pub struct SecretKey(XChaCha20Poly1305);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// The key in `path` (64 hex digits); when there is no such file, a new
    /// random key written there, readable by the owner only. Replicas that
    /// share a database share this file.
    pub fn load_or_create(path: &Path) -> Result<SecretKey, String> {
        let shown = path.display();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim())
                    .ok()
                    .filter(|b| b.len() == 32)
                    .ok_or_else(|| {
                        format!("secrets key file {shown} does not hold 64 hex digits")
                    })?;
                Ok(SecretKey(
                    XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| {
                        format!("secrets key file {shown} does not hold a 32-byte key")
                    })?,
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = XChaCha20Poly1305::generate_key(&mut OsRng);
                // create_new: two replicas starting at once never each
                // write their own key; the loser reads the winner's.
                let mut f = match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        return SecretKey::load_or_create(path)
                    }
                    Err(e) => return Err(format!("cannot create secrets key file {shown}: {e}")),
                };
                f.write_all(format!("{}\n", hex::encode(key)).as_bytes())
                    .and_then(|()| f.sync_all())
                    .map_err(|e| format!("cannot write secrets key file {shown}: {e}"))?;
                tracing::info!("made a new key for sync secrets in {shown}; keep it with the data folder's backups");
                Ok(SecretKey(XChaCha20Poly1305::new(&key)))
            }
            Err(e) => Err(format!("cannot read secrets key file {shown}: {e}")),
        }
    }

    /// `value` sealed for the secret `name`: a random 24-byte nonce (safe
    /// to draw at random at this size) and the ciphertext with its tag.
    fn seal(&self, name: &str, value: &[u8]) -> (String, String) {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .0
            .encrypt(
                &nonce,
                Payload {
                    msg: value,
                    aad: name.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any message shorter than 256 GiB");
        (B64.encode(nonce), B64.encode(sealed))
    }

    fn open(&self, name: &str, nonce: &str, sealed: &str) -> Option<Vec<u8>> {
        let nonce = B64.decode(nonce).ok().filter(|n| n.len() == 24)?;
        let sealed = B64.decode(sealed).ok()?;
        self.0
            .decrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &sealed,
                    aad: name.as_bytes(),
                },
            )
            .ok()
    }
}

/// A value sealed under the secrets key for a name, on its own: what an
/// API key keeps of its secret for the S3 gateway (SPEC.md §10.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    nonce: String,
    value: String,
}

impl Sealed {
    pub fn seal(key: &SecretKey, name: &str, value: &[u8]) -> Sealed {
        let (nonce, value) = key.seal(name, value);
        Sealed { nonce, value }
    }

    /// The value, if it opens under `key` for `name`.
    pub fn open(&self, key: &SecretKey, name: &str) -> Option<Vec<u8>> {
        key.open(name, &self.nonce, &self.value)
    }
}

/// A secret as the database keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSecret {
    #[serde(rename = "for", default)]
    pub for_sources: Vec<String>,
    #[serde(default)]
    pub dest: Vec<String>,
    nonce: String,
    value: String,
}

impl StoredSecret {
    /// `value` sealed under `key`, bound as given.
    pub fn seal(
        key: &SecretKey,
        name: &str,
        value: &[u8],
        for_sources: Vec<String>,
        dest: Vec<String>,
    ) -> StoredSecret {
        let (nonce, value) = key.seal(name, value);
        StoredSecret {
            for_sources,
            dest,
            nonce,
            value,
        }
    }

    /// The same value, bound anew.
    pub fn rebound(self, for_sources: Vec<String>, dest: Vec<String>) -> StoredSecret {
        StoredSecret {
            for_sources,
            dest,
            ..self
        }
    }

    /// The value, opened with `key`.
    pub fn value(&self, key: &SecretKey, name: &str) -> Result<Vec<u8>, String> {
        key.open(name, &self.nonce, &self.value).ok_or_else(|| {
            format!("secret {name} does not open with this registry's secrets key; is secrets_key_file the one it was stored with?")
        })
    }

    pub fn info(&self, name: &str) -> api::SecretInfo {
        api::SecretInfo {
            name: name.to_string(),
            for_sources: self.for_sources.clone(),
            dest: self.dest.clone(),
        }
    }

    /// Why a job that reads `source` into `dest`, started by an admin or
    /// not, may not use this secret, if it may not.
    pub fn refusal(
        &self,
        name: &str,
        source: &str,
        dest: &str,
        by_admin: bool,
        net: &NetPolicy,
    ) -> Option<String> {
        let src = match Scope::of(source) {
            Ok(s) => s,
            Err(e) => return Some(e.message),
        };
        if self.for_sources.is_empty() {
            return (!by_admin).then(|| {
                format!("secret {name} is bound to no source, so only admins' jobs may use it; an admin binds it with `sealvol secret bind {name} --for URI`")
            });
        }
        let covered = self
            .for_sources
            .iter()
            .filter_map(|f| Scope::of(f).ok())
            .any(|bound| covers(&bound, &src, net));
        if !covered {
            return Some(format!(
                "secret {name} may not be sent to {source}: it is bound to {}",
                self.for_sources.join(", ")
            ));
        }
        if !self.dest.is_empty() && !self.dest.iter().any(|g| glob_matches(g, dest)) {
            return Some(format!(
                "secret {name} may not be used for {dest}: it is bound to destinations {}",
                self.dest.join(", ")
            ));
        }
        None
    }
}

/// Whether a secret bound to `bound` may go to `src`: the same place (or
/// one below it) at the same endpoint; a `for` URI that names no endpoint
/// covers the endpoints the admin lists, as the source's own would be.
fn covers(bound: &Scope, src: &Scope, net: &NetPolicy) -> bool {
    let default_endpoint = Scope {
        endpoint: src.endpoint.clone(),
        ..bound.clone()
    };
    bound.covers(src)
        || (bound.endpoint.is_none()
            && src
                .endpoint
                .as_deref()
                .is_some_and(|e| net.endpoint_listed(e))
            && default_endpoint.covers(src))
}

fn glob_matches(glob: &str, name: &str) -> bool {
    globset::GlobBuilder::new(glob)
        .literal_separator(true)
        .build()
        .is_ok_and(|g| g.compile_matcher().is_match(name))
}

/// Checks what a secret is bound to when it is set: every `for` a source
/// URI a secret can go to, every `dest` a glob.
pub fn check_binding(for_sources: &[String], dest: &[String]) -> Result<(), String> {
    if for_sources.is_empty() {
        return Err(
            "a secret must name the sources it may be sent to: add ?for=URI (sealvol secret set NAME --for URI)"
                .into(),
        );
    }
    for f in for_sources {
        Scope::of(f).map_err(|e| e.message)?;
    }
    for g in dest {
        globset::GlobBuilder::new(g)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("dest {g:?} is not a glob: {e}"))?;
    }
    Ok(())
}

/// Why `source`'s `?endpoint=` override may not be used, if it may not:
/// it must be in `sync_endpoints`, or named by a `for` URI of the secret
/// the job uses. Without the check the host's own credentials (object
/// stores read them from the environment) would go wherever a URI says.
pub fn endpoint_refusal(
    source: &str,
    secret: Option<&StoredSecret>,
    net: &NetPolicy,
) -> Option<String> {
    let src = Scope::of(source).ok()?;
    let endpoint = src.endpoint.as_deref()?;
    if net.endpoint_listed(endpoint) {
        return None;
    }
    let named = secret.is_some_and(|s| {
        s.for_sources
            .iter()
            .filter_map(|f| Scope::of(f).ok())
            .any(|b| b.endpoint.as_deref() == Some(endpoint) && b.covers(&src))
    });
    (!named).then(|| {
        format!("{source}: the endpoint {endpoint} is not one this registry syncs from; an admin lists it in registry.toml sync_endpoints, or binds the job's secret to it")
    })
}

/// `message` with every occurrence of the secret's value (and of each of
/// its lines and `:`-separated parts, which sources send separately)
/// replaced, so an echo from a source never lands in a job record.
pub fn scrub(message: &str, value: Option<&str>) -> String {
    let Some(value) = value else {
        return message.to_string();
    };
    let mut out = message.to_string();
    let parts = std::iter::once(value.trim())
        .chain(value.split(['\n', ':']).map(str::trim))
        .filter(|p| p.len() >= 4);
    for p in parts {
        out = out.replace(p, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SecretKey {
        SecretKey(XChaCha20Poly1305::new(&XChaCha20Poly1305::generate_key(
            &mut OsRng,
        )))
    }

    fn bound(for_sources: &[&str], dest: &[&str]) -> StoredSecret {
        StoredSecret::seal(
            &key(),
            "s",
            b"v",
            for_sources.iter().map(|s| s.to_string()).collect(),
            dest.iter().map(|s| s.to_string()).collect(),
        )
    }

    #[test]
    fn values_open_only_under_their_key_and_name() {
        let k = key();
        let s = StoredSecret::seal(&k, "hf", b"hf_token", vec!["hf://org".into()], vec![]);
        assert_eq!(s.value(&k, "hf").unwrap(), b"hf_token");
        assert!(s.value(&k, "other").is_err(), "the name is bound in");
        assert!(s.value(&key(), "hf").is_err());
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("hf_token"), "{json}");
        let again = StoredSecret::seal(&k, "hf", b"hf_token", vec![], vec![]);
        assert_ne!(again.value, s.value, "nonces differ");
    }

    #[test]
    fn key_files_are_made_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        let k = SecretKey::load_or_create(&path).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let s = StoredSecret::seal(&k, "n", b"value", vec![], vec![]);
        let again = SecretKey::load_or_create(&path).unwrap();
        assert_eq!(s.value(&again, "n").unwrap(), b"value");
        std::fs::write(&path, "nothex").unwrap();
        assert!(SecretKey::load_or_create(&path).is_err());
    }

    #[test]
    fn bindings_decide_who_may_use_a_secret() {
        let net = NetPolicy::default();
        let s = bound(&["s3://bucket-a"], &["weights/**"]);
        assert_eq!(
            s.refusal("s", "s3://bucket-a/x", "weights/q", false, &net),
            None
        );
        assert!(s
            .refusal("s", "s3://bucket-b", "weights/q", true, &net)
            .is_some_and(|m| m.contains("bound to s3://bucket-a")));
        assert!(s
            .refusal("s", "s3://bucket-a", "other/q", false, &net)
            .is_some_and(|m| m.contains("destinations weights/**")));
        assert!(s
            .refusal(
                "s",
                "s3://bucket-a?endpoint=http://127.0.0.1:1",
                "weights/q",
                true,
                &net
            )
            .is_some());
        let unbound = bound(&[], &[]);
        assert!(unbound.refusal("s", "s3://b", "w/x", false, &net).is_some());
        assert_eq!(unbound.refusal("s", "s3://b", "w/x", true, &net), None);
        assert!(bound(&["s3://b"], &[])
            .refusal("s", "dir:///srv", "w/x", true, &net)
            .is_some());
    }

    #[test]
    fn endpoint_overrides_need_the_list_or_a_binding() {
        let none = NetPolicy::default();
        let listed = NetPolicy::new(false, ["http://127.0.0.1:9000"]).unwrap();
        let src = "s3://b/p?endpoint=http://127.0.0.1:9000/";
        assert!(endpoint_refusal(src, None, &none).is_some());
        assert_eq!(endpoint_refusal(src, None, &listed), None);
        assert_eq!(endpoint_refusal("s3://b/p", None, &none), None);
        let s = bound(&["s3://b?endpoint=http://127.0.0.1:9000"], &[]);
        assert_eq!(endpoint_refusal(src, Some(&s), &none), None);
        assert!(
            endpoint_refusal("s3://other?endpoint=http://127.0.0.1:9000", Some(&s), &none)
                .is_some()
        );
        // A `for` without an endpoint covers a listed one.
        let plain = bound(&["s3://b"], &[]);
        assert_eq!(plain.refusal("s", src, "w/x", false, &listed), None);
        assert!(plain.refusal("s", src, "w/x", false, &none).is_some());
    }

    #[test]
    fn bindings_are_checked_when_set() {
        assert!(check_binding(&[], &[]).is_err());
        assert!(check_binding(&["dir:///srv".into()], &[]).is_err());
        assert!(check_binding(&["s3://b".into()], &["w/[".into()]).is_err());
        assert!(check_binding(&["s3://b".into(), "hf://org".into()], &["w/**".into()]).is_ok());
    }

    #[test]
    fn echoed_values_are_scrubbed() {
        assert_eq!(
            scrub("denied for AKIA123:wJalrXUtn", Some("AKIA123:wJalrXUtn\n")),
            "denied for ***"
        );
        assert_eq!(
            scrub("key AKIA123 bad", Some("AKIA123:wJalrXUtn")),
            "key *** bad"
        );
        assert_eq!(scrub("x", None), "x");
    }
}
