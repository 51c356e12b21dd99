//! The registry's own token server, per the distribution token spec
//! (SPEC.md §7.5): a 401 challenges with `Bearer realm=…/token`, a client
//! asks `GET /token?service=…&scope=repository:ns/vol:pull,push` (with
//! Basic credentials, or none for what anonymous callers may do) or posts
//! the OAuth2 password form, and gets a short-lived JWT granting the
//! intersection of what it asked and what the policy allows. Tokens are
//! HS256 with a key from `signing_key_file` (generated 0600 in the data
//! folder at first start, so replicas can share one file); a verified
//! token is cached until it expires. Tokens of an external issuer (an OIDC
//! provider, `[auth.token]`) are accepted too, checked against its JWK set
//! ([`External`]).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::auth::policy::{Policy, Subject};
use sealvol_spec::api::Action;

/// Most scopes one token request may name, and longest scope string.
const MAX_SCOPES: usize = 32;
/// How long a web view session lasts: a working day.
pub const SESSION_SECONDS: u64 = 8 * 3600;

/// Most cached verified tokens.
const MAX_CACHED: usize = 10_000;

/// One `access` entry of a token (the distribution token spec's claim).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceAccess {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub actions: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: String,
    exp: u64,
    nbf: u64,
    iat: u64,
    jti: String,
    access: Vec<ResourceAccess>,
}

/// The answer of `/token`.
#[derive(Debug, Serialize)]
pub struct TokenAnswer {
    pub token: String,
    pub access_token: String,
    pub expires_in: u64,
    pub issued_at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read or create the token signing key {path}: {message}")]
    Key { path: PathBuf, message: String },
}

/// A token the registry issued, checked.
#[derive(Clone, Debug)]
pub struct Grant {
    pub subject: Subject,
    /// `None`: a token of an external issuer without an `access` claim,
    /// which leaves the decision to the policy alone.
    access: Option<Vec<ResourceAccess>>,
    exp: u64,
}

impl Grant {
    /// Whether the token grants `action` on repository `name`.
    pub fn grants(&self, name: &str, action: Action) -> bool {
        let Some(access) = &self.access else {
            return true;
        };
        access.iter().any(|a| {
            a.kind == "repository"
                && a.name == name
                && a.actions.iter().any(|x| x == action.as_str() || x == "*")
        })
    }
}

/// Tokens already checked, by their SHA-256, until they expire: a token is
/// verified once, not on every request it comes with.
#[derive(Default)]
struct Verified(Mutex<HashMap<[u8; 32], Grant>>);

impl Verified {
    fn key(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    fn get(&self, key: &[u8; 32], now: u64) -> Option<Grant> {
        let cache = self.0.lock().expect("token cache");
        cache.get(key).filter(|g| g.exp > now).cloned()
    }

    fn insert(&self, key: [u8; 32], grant: &Grant, now: u64) {
        let mut cache = self.0.lock().expect("token cache");
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, g| g.exp > now);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(key, grant.clone());
    }
}

pub struct Issuer {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// `iss` and `aud`: the registry's host as clients see it.
    service: String,
    /// Where clients ask for tokens.
    pub realm: String,
    ttl: u64,
    verified: Verified,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("service", &self.service)
            .field("realm", &self.realm)
            .finish_non_exhaustive()
    }
}

/// Reads the signing key, or makes one (32 random bytes, hex, 0600).
pub fn load_or_create_key(path: &Path) -> Result<Vec<u8>, TokenError> {
    let err = |message: String| TokenError::Key {
        path: path.to_path_buf(),
        message,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let key = hex::decode(text.trim()).map_err(|_| err("not hex".into()))?;
            if key.len() < 32 {
                return Err(err("shorter than 32 bytes".into()));
            }
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = vec![0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut r| r.read_exact(&mut key))
                .map_err(|e| err(e.to_string()))?;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| err(e.to_string()))?;
            f.write_all(hex::encode(&key).as_bytes())
                .and_then(|_| f.sync_all())
                .map_err(|e| err(e.to_string()))?;
            Ok(key)
        }
        Err(e) => Err(err(e.to_string())),
    }
}

/// A scope the client asked for: `repository:NAME:ACTIONS`.
#[doc(hidden)] // pub for the fuzz targets (fuzz/)
pub fn parse_scope(scope: &str) -> Option<(&str, &str, Vec<&str>)> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    if name.is_empty() || name.len() > 512 {
        return None;
    }
    Some((
        kind,
        name,
        actions.split(',').filter(|a| !a.is_empty()).collect(),
    ))
}

impl Issuer {
    pub fn new(key: &[u8], service: String, realm: String, ttl: u64) -> Issuer {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[&service]);
        validation.set_issuer(&[&service]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        Issuer {
            encoding: EncodingKey::from_secret(key),
            decoding: DecodingKey::from_secret(key),
            validation,
            service,
            realm,
            ttl: ttl.max(1),
            verified: Verified::default(),
        }
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    /// A token for `subject` with what `scopes` ask and `policy` allows.
    pub fn issue(
        &self,
        policy: &Policy,
        subject: &Subject,
        scopes: &[String],
        now: u64,
    ) -> Result<TokenAnswer, String> {
        let mut access: Vec<ResourceAccess> = Vec::new();
        let asked: Vec<&str> = scopes
            .iter()
            .flat_map(|s| s.split(' '))
            .filter(|s| !s.is_empty())
            .collect();
        if asked.len() > MAX_SCOPES {
            return Err(format!("at most {MAX_SCOPES} scopes per token"));
        }
        for scope in asked {
            let (kind, name, actions) =
                parse_scope(scope).ok_or_else(|| format!("malformed scope {scope:?}"))?;
            let granted: Vec<String> = match kind {
                "repository" => {
                    let allowed = policy.actions(subject, name);
                    allowed
                        .iter()
                        .filter(|a| actions.iter().any(|x| *x == a.as_str() || *x == "*"))
                        .map(|a| a.as_str().to_string())
                        .collect()
                }
                "registry" if name == "catalog" && policy.knows(subject) => vec!["*".into()],
                _ => Vec::new(),
            };
            if !granted.is_empty() {
                access.push(ResourceAccess {
                    kind: kind.to_string(),
                    name: name.to_string(),
                    actions: granted,
                });
            }
        }
        let claims = Claims {
            iss: self.service.clone(),
            sub: match subject {
                Subject::Anonymous => String::new(),
                Subject::User(u) => u.clone(),
                Subject::Key(k) => k.id.clone(),
            },
            aud: self.service.clone(),
            exp: now + self.ttl,
            nbf: now.saturating_sub(1),
            iat: now,
            jti: uuid::Uuid::new_v4().to_string(),
            access,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| format!("cannot sign a token: {e}"))?;
        Ok(TokenAnswer {
            access_token: token.clone(),
            token,
            expires_in: self.ttl,
            issued_at: crate::clock::rfc3339(now),
        })
    }

    /// The audience of web view sessions: not the service's, so a session
    /// is no bearer token and a bearer token no session.
    fn session_audience(&self) -> String {
        format!("{}/ui", self.service)
    }

    /// A web view session token for `subject`, and its lifetime: it names
    /// the subject and grants nothing itself (the policy decides each
    /// request).
    pub fn session(&self, subject: &Subject, now: u64) -> Result<(String, u64), &'static str> {
        let sub = match subject {
            Subject::Anonymous => return Err("log in as a user"),
            Subject::User(u) => u.clone(),
            Subject::Key(k) => k.id.clone(),
        };
        let claims = Claims {
            iss: self.service.clone(),
            sub,
            aud: self.session_audience(),
            exp: now + SESSION_SECONDS,
            nbf: now.saturating_sub(1),
            iat: now,
            jti: uuid::Uuid::new_v4().to_string(),
            access: Vec::new(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|_| "cannot sign a session")?;
        Ok((token, SESSION_SECONDS))
    }

    /// The subject of a web view session token, if it checks out
    /// (signature, issuer, the sessions' audience, times, against the
    /// system clock as for bearer tokens).
    pub fn verify_session(&self, token: &str) -> Option<Subject> {
        let mut validation = self.validation.clone();
        validation.set_audience(&[self.session_audience()]);
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).ok()?;
        (!data.claims.sub.is_empty()).then(|| Subject::User(data.claims.sub))
    }

    /// Checks a bearer token (signature, issuer, audience, times), once per
    /// token until it expires.
    pub fn verify(&self, token: &str, now: u64) -> Option<Grant> {
        let key = Verified::key(token);
        if let Some(g) = self.verified.get(&key, now) {
            return Some(g);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation).ok()?;
        let c = data.claims;
        let grant = Grant {
            subject: if c.sub.is_empty() {
                Subject::Anonymous
            } else {
                Subject::User(c.sub)
            },
            access: Some(c.access),
            exp: c.exp,
        };
        self.verified.insert(key, &grant, now);
        Some(grant)
    }

    /// The `WWW-Authenticate` value for a request that needs `scope`.
    pub fn challenge(&self, scope: Option<&str>) -> String {
        let mut c = format!(
            "Bearer realm=\"{}\",service=\"{}\"",
            self.realm, self.service
        );
        if let Some(s) = scope {
            c.push_str(&format!(",scope=\"{s}\""));
        }
        c
    }
}

/// `[auth.token]`: accept tokens of an external issuer (an OIDC provider
/// in front of the registry), checked against its published keys.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalConfig {
    /// The tokens' `iss`.
    pub issuer: String,
    /// The tokens' `aud`.
    pub audience: String,
    /// The issuer's JSON Web Key Set (its `jwks_uri` document), as a file.
    pub jwks_file: PathBuf,
}

/// Largest JWKS file read.
const MAX_JWKS: u64 = 1 << 20;

/// Tokens of an external issuer: asymmetric signatures only (so a key
/// meant for verifying can never be used as an HMAC secret), `iss`, `aud`,
/// `exp` and `nbf` checked. Their `sub` is the subject the policy decides
/// for; an `access` claim, where the issuer adds one, narrows it further.
pub struct External {
    keys: JwkSet,
    issuer: String,
    audience: String,
    verified: Verified,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("keys", &self.keys.keys.len())
            .finish()
    }
}

#[derive(Deserialize)]
struct ExternalClaims {
    sub: String,
    exp: u64,
    #[serde(default)]
    access: Option<Vec<ResourceAccess>>,
}

impl External {
    pub fn load(config: &ExternalConfig) -> Result<External, TokenError> {
        let err = |message: String| TokenError::Key {
            path: config.jwks_file.clone(),
            message,
        };
        let len = std::fs::metadata(&config.jwks_file)
            .map_err(|e| err(e.to_string()))?
            .len();
        if len > MAX_JWKS {
            return Err(err(format!("larger than {MAX_JWKS} bytes")));
        }
        let text = std::fs::read(&config.jwks_file).map_err(|e| err(e.to_string()))?;
        let keys: JwkSet =
            serde_json::from_slice(&text).map_err(|e| err(format!("not a JWK set: {e}")))?;
        if keys.keys.is_empty() {
            return Err(err("the JWK set holds no key".into()));
        }
        Ok(External {
            keys,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            verified: Verified::default(),
        })
    }

    /// Checks a bearer token of the external issuer, once per token until
    /// it expires; `None` for anything that does not check out.
    pub fn verify(&self, token: &str, now: u64) -> Option<Grant> {
        let key = Verified::key(token);
        if let Some(g) = self.verified.get(&key, now) {
            return Some(g);
        }
        let header = jsonwebtoken::decode_header(token).ok()?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return None;
        }
        let jwk = match &header.kid {
            Some(kid) => self.keys.find(kid)?,
            None if self.keys.keys.len() == 1 => &self.keys.keys[0],
            None => return None,
        };
        let decoding = DecodingKey::from_jwk(jwk).ok()?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let c = jsonwebtoken::decode::<ExternalClaims>(token, &decoding, &validation)
            .ok()?
            .claims;
        if c.sub.is_empty() || c.sub.starts_with(sealvol_spec::api::API_KEY_PREFIX) {
            return None;
        }
        let grant = Grant {
            subject: Subject::User(c.sub),
            access: c.access,
            exp: c.exp,
        };
        self.verified.insert(key, &grant, now);
        Some(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::policy::AccessEntry;
    use jsonwebtoken::jwk::Jwk;

    fn policy() -> Policy {
        Policy::new(
            vec![],
            vec![],
            vec![],
            vec![AccessEntry {
                repositories: vec!["weights/**".into()],
                users: vec!["w".into()],
                actions: vec![Action::Pull, Action::Push],
                ..AccessEntry::default()
            }],
        )
        .unwrap()
    }

    #[test]
    fn grants_the_intersection_and_rejects_forgeries() {
        // jsonwebtoken checks times against the clock.
        let now = jsonwebtoken::get_current_timestamp();
        let i = Issuer::new(
            &[7; 32],
            "reg:5000".into(),
            "http://reg:5000/token".into(),
            300,
        );
        let w = Subject::User("w".into());
        let t = i
            .issue(
                &policy(),
                &w,
                &["repository:weights/a:pull,push,delete repository:other/b:pull".into()],
                now,
            )
            .unwrap();
        let g = i.verify(&t.token, now).unwrap();
        assert_eq!(g.subject, w);
        assert!(g.grants("weights/a", Action::Pull));
        assert!(g.grants("weights/a", Action::Push));
        assert!(!g.grants("weights/a", Action::Delete));
        assert!(!g.grants("other/b", Action::Pull));
        // Expired, another audience, another key, a tampered payload.
        let fresh = Issuer::new(&[7; 32], "reg:5000".into(), String::new(), 300);
        assert!(fresh.verify(&t.token, now).is_some());
        let old = i.issue(&policy(), &w, &[], now - 1_000).unwrap();
        assert!(fresh.verify(&old.token, now).is_none());
        let other = Issuer::new(&[7; 32], "elsewhere".into(), String::new(), 300);
        assert!(other.verify(&t.token, now).is_none());
        let rekeyed = Issuer::new(&[8; 32], "reg:5000".into(), String::new(), 300);
        assert!(rekeyed.verify(&t.token, now).is_none());
        let mut parts: Vec<String> = t.token.split('.').map(String::from).collect();
        parts[1] = parts[1].replace('a', "b");
        assert!(fresh.verify(&parts.join("."), now).is_none());
        assert!(i.issue(&policy(), &w, &["nonsense".into()], 1).is_err());
    }

    /// A P-256 key of the tests' own "external issuer".
    const EXTERNAL_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgB8Clw8N6iSGH0hjk
lxQii+Se+Fm/l7AEGfMMW1WyxQChRANCAAT5OPRXrw5UR0Ljb+witTte9i9EbTjM
Ol8KGwuBBb5wDE4dj7gx3opTkylSfO8Xix/U+vFN7EC46AD24AzlUPtw
-----END PRIVATE KEY-----";
    const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgypJq2hV7SJm3LaCk
79AyfKtj6KwZfAwTI2kUd5DbkiShRANCAATRqSjHB5Iy3+lxsYCo1ri/rgOswueJ
gdUN+aiDEAsK0j1KWXeGCDXYj8nc88kpUL/XTWd0aSUfiKnTZWTxFyMd
-----END PRIVATE KEY-----";

    /// The PKCS#8 key a PEM block holds (its body is the DER in base64).
    fn ec_key(pem: &str) -> EncodingKey {
        use base64::Engine as _;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        EncodingKey::from_ec_der(&der)
    }

    #[test]
    fn external_tokens_are_checked_against_the_issuers_keys() {
        let now = jsonwebtoken::get_current_timestamp();
        let signing = ec_key(EXTERNAL_KEY);
        let mut jwk = Jwk::from_encoding_key(&signing, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some("k1".into());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jwks.json");
        std::fs::write(
            &file,
            serde_json::to_vec(&JwkSet { keys: vec![jwk] }).unwrap(),
        )
        .unwrap();
        let ext = External::load(&ExternalConfig {
            issuer: "https://idp.example".into(),
            audience: "sealvol".into(),
            jwks_file: file,
        })
        .unwrap();
        let sign = |key: &EncodingKey, kid: &str, claims: serde_json::Value| {
            let mut h = Header::new(Algorithm::ES256);
            h.kid = Some(kid.into());
            jsonwebtoken::encode(&h, &claims, key).unwrap()
        };
        let claims = |iss: &str, aud: &str, exp: u64| serde_json::json!({"iss": iss, "aud": aud, "sub": "alice", "exp": exp, "nbf": now - 10});
        let good = sign(
            &signing,
            "k1",
            claims("https://idp.example", "sealvol", now + 60),
        );
        let g = ext.verify(&good, now).unwrap();
        assert_eq!(g.subject, Subject::User("alice".into()));
        assert!(
            g.grants("any/repo", Action::Push),
            "no access claim: the policy decides"
        );
        // Another issuer, another audience, expired, another key, no such kid.
        for bad in [
            sign(&signing, "k1", claims("https://evil", "sealvol", now + 60)),
            sign(
                &signing,
                "k1",
                claims("https://idp.example", "other", now + 60),
            ),
            sign(
                &signing,
                "k1",
                claims("https://idp.example", "sealvol", now - 600),
            ),
            sign(
                &ec_key(OTHER_KEY),
                "k1",
                claims("https://idp.example", "sealvol", now + 60),
            ),
            sign(
                &signing,
                "k2",
                claims("https://idp.example", "sealvol", now + 60),
            ),
        ] {
            assert!(ext.verify(&bad, now).is_none());
        }
        // An access claim narrows what the token may do.
        let mut c = claims("https://idp.example", "sealvol", now + 60);
        c["access"] =
            serde_json::json!([{"type": "repository", "name": "w/a", "actions": ["pull"]}]);
        let g = ext.verify(&sign(&signing, "k1", c), now).unwrap();
        assert!(g.grants("w/a", Action::Pull));
        assert!(!g.grants("w/a", Action::Push));
        // An HMAC token keyed with anything is refused outright.
        let hs = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims("https://idp.example", "sealvol", now + 60),
            &EncodingKey::from_secret(b"x"),
        )
        .unwrap();
        assert!(ext.verify(&hs, now).is_none());
    }

    #[test]
    fn sessions_and_bearer_tokens_are_not_each_other() {
        let now = jsonwebtoken::get_current_timestamp();
        let i = Issuer::new(&[7; 32], "reg:5000".into(), String::new(), 300);
        let w = Subject::User("w".into());
        let (session, ttl) = i.session(&w, now).unwrap();
        assert_eq!(ttl, SESSION_SECONDS);
        assert!(matches!(i.verify_session(&session), Some(Subject::User(u)) if u == "w"));
        // A session is no bearer token, and a bearer token no session.
        assert!(i.verify(&session, now).is_none());
        let bearer = i.issue(&Policy::default(), &w, &[], now).unwrap().token;
        assert!(i.verify_session(&bearer).is_none());
        // Another key's session, and anonymous ones, are refused.
        let other = Issuer::new(&[8; 32], "reg:5000".into(), String::new(), 300);
        assert!(i
            .verify_session(&other.session(&w, now).unwrap().0)
            .is_none());
        assert!(i.session(&Subject::Anonymous, now).is_err());
    }

    #[test]
    fn keys_are_created_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token.key");
        let k1 = load_or_create_key(&p).unwrap();
        let k2 = load_or_create_key(&p).unwrap();
        assert_eq!(k1, k2);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any string is refused without panicking, as is any token
        /// issued here with one character changed; the token itself is
        /// accepted.
        #[test]
        fn tokens_verify_only_unaltered(
            junk in "\\PC{0,200}",
            at in proptest::prelude::any::<proptest::sample::Index>(),
            with in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let now = jsonwebtoken::get_current_timestamp();
            let i = Issuer::new(&[7; 32], "reg:5000".into(), String::new(), 300);
            proptest::prop_assert!(i.verify(&junk, now).is_none());
            let w = Subject::User("w".into());
            let t = i.issue(&policy(), &w, &["repository:weights/a:pull".into()], now).unwrap().token;
            proptest::prop_assert!(i.verify(&t, now).is_some());
            const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.";
            let mut bytes = t.clone().into_bytes();
            let pos = at.index(bytes.len());
            let c = ALPHABET[with.index(ALPHABET.len())];
            proptest::prop_assume!(bytes[pos] != c);
            bytes[pos] = c;
            let mutated = String::from_utf8(bytes).unwrap();
            // A fresh issuer: no cache of verified tokens to answer from.
            let fresh = Issuer::new(&[7; 32], "reg:5000".into(), String::new(), 300);
            // Base64url's last character may carry unused bits: a change
            // there can decode to the same bytes, and so verify.
            let same = fresh.verify(&mutated, now).is_some_and(|g| g.subject == w);
            let last_of_part = pos + 1 == mutated.len() || mutated.as_bytes()[pos + 1] == b'.';
            proptest::prop_assert!(!same || last_of_part, "{mutated} verified");
        }
    }
}
