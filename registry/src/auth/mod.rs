//! Who is calling and what they may do (SPEC.md §7.5), with no HTTP in
//! it: the `[auth]` section of `registry.toml`, [`Credentials`] (which
//! the HTTP layer reads from headers and the session cookie) checked
//! against an htpasswd file ([`htpasswd`]), API keys and tokens
//! ([`tokens`]), the pure [`policy`], and the [`Caller`] a handler asks.
//! The layers that consult it are `http::layers`.
//!
//! Credentials never reach a log line: a failed login logs the user name
//! only, and a denial logs subject, repository and action.

pub mod caller;
pub mod htpasswd;
pub mod policy;
pub mod tokens;

pub use caller::Caller;
pub use htpasswd::Htpasswd;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::auth::policy::{AccessEntry, Policy, Subject};
use crate::auth::tokens::{External, ExternalConfig, Grant, Issuer};
use crate::store::meta::keys::KeyGrant;
use crate::store::meta::MetaStore;
use sealvol_spec::api::{Action, API_KEY_PREFIX};

/// How long a successful password check is remembered.
const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// bcrypt checks that may run at once: each costs ~50-250 ms of a core.
const BCRYPT_AT_ONCE: usize = 2;
/// How long a failed login waits before it is answered.
const FAILED_LOGIN_DELAY: Duration = Duration::from_secs(1);
/// Most successful checks remembered.
const MAX_VERIFIED: usize = 10_000;

/// `registry.toml` `[auth]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// bcrypt entries (`htpasswd -B`), the format distribution and zot read.
    pub htpasswd: Option<PathBuf>,
    /// The address clients use (`https://registry.example.com`): the
    /// registry's own `Origin`. Default: derived from the bound address.
    pub public_url: Option<String>,
    /// Users who may do everything, including GC and secrets.
    #[serde(default)]
    pub admins: Vec<String>,
    /// What callers without credentials may do where no entry matches.
    #[serde(default)]
    pub anonymous: Vec<Action>,
    /// What any authenticated caller may do where no entry matches.
    #[serde(default)]
    pub default: Vec<Action>,
    #[serde(default)]
    pub access: Vec<AccessEntry>,
    /// `[auth.groups]`: named sets of users that access entries grant to.
    #[serde(default)]
    pub groups: HashMap<String, Vec<String>>,
    /// Lifetime of the tokens `/token` issues (default 300).
    pub token_ttl_seconds: Option<u64>,
    /// The key tokens are signed with (hex, 32+ bytes); default
    /// `token.key` in the data folder, created at first start.
    pub signing_key_file: Option<PathBuf>,
    /// `[auth.token]`: also accept tokens of this external issuer.
    pub token: Option<ExternalConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(transparent)]
    Htpasswd(#[from] htpasswd::HtpasswdError),
    #[error("[auth] public_url {0:?} is not an http:// or https:// URL")]
    PublicUrl(String),
    #[error(transparent)]
    Policy(#[from] crate::auth::policy::PolicyError),
    #[error(transparent)]
    Token(#[from] crate::auth::tokens::TokenError),
}

/// What a request presented, as the HTTP layer read it from its
/// `Authorization` header or the web view's session cookie; `auth` never
/// sees the request itself.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    None,
    Basic {
        user: String,
        password: String,
    },
    Bearer(String),
    /// The web view's session token (its cookie).
    Session(String),
    /// An `Authorization` value that is neither: what is wrong with it.
    Malformed(&'static str),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets never reach a log line.
        f.write_str(match self {
            Credentials::None => "None",
            Credentials::Basic { .. } => "Basic",
            Credentials::Bearer(_) => "Bearer",
            Credentials::Session(_) => "Session",
            Credentials::Malformed(_) => "Malformed",
        })
    }
}

impl Credentials {
    /// A user name and password typed into a form (the web view's login,
    /// `POST /token`), read as the same two in a Basic header would be:
    /// the user name ends at the first `:`.
    pub fn login(user: &str, password: &str) -> Credentials {
        let joined = format!("{user}:{password}");
        let (user, password) = joined.split_once(':').unwrap_or((&joined, ""));
        Credentials::Basic {
            user: user.to_string(),
            password: password.to_string(),
        }
    }
}

/// What a bearer token sent where Basic credentials are expected hears.
pub const UNSUPPORTED_SCHEME: &str =
    "unsupported authorization scheme (use Basic or a token from /token)";

/// The authentication and authorization state every request consults.
pub struct Auth {
    pub(crate) policy: Policy,
    pub(crate) users: Option<Htpasswd>,
    /// The token server; `None` on an open registry.
    pub(crate) issuer: Option<Issuer>,
    /// An external token issuer whose tokens are accepted too.
    pub(crate) external: Option<External>,
    /// Where API keys live; `None` on an open registry.
    pub(crate) meta: Option<Arc<MetaStore>>,
    /// The `Origin`s that may write to `/api/v1`.
    pub(crate) origins: Vec<String>,
    /// sha256(user, password) of recent successful checks -> when.
    pub(crate) verified: Mutex<HashMap<[u8; 32], Instant>>,
    pub(crate) bcrypt: Semaphore,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("policy", &self.policy)
            .field("issuer", &self.issuer)
            .field("origins", &self.origins)
            .finish_non_exhaustive()
    }
}

impl Auth {
    pub(crate) fn new(
        policy: Policy,
        users: Option<Htpasswd>,
        issuer: Option<Issuer>,
        meta: Option<Arc<MetaStore>>,
        origins: Vec<String>,
    ) -> Auth {
        Auth {
            policy,
            users,
            issuer,
            external: None,
            meta,
            origins,
            verified: Mutex::new(HashMap::new()),
            bcrypt: Semaphore::new(BCRYPT_AT_ONCE),
        }
    }

    /// From `[auth]` for a registry listening on `addr` (with TLS when
    /// `tls`) with its data in `root` and its API keys in `meta`. Without
    /// `[auth]`, `open` says what anyone may do: the open loopback
    /// registry, or anonymous writes.
    pub fn from_config(
        config: Option<&AuthConfig>,
        open: Policy,
        addr: SocketAddr,
        tls: bool,
        root: &Path,
        meta: Arc<MetaStore>,
    ) -> Result<Auth, AuthError> {
        let scheme = if tls { "https" } else { "http" };
        let mut origins = vec![format!("{scheme}://{addr}")];
        if addr.ip().is_loopback() {
            origins.push(format!("{scheme}://localhost:{}", addr.port()));
        }
        let Some(config) = config else {
            return Ok(Auth::new(open, None, None, None, origins));
        };
        let public = match &config.public_url {
            Some(url) => origin_of(url).ok_or_else(|| AuthError::PublicUrl(url.clone()))?,
            None => origins[0].clone(),
        };
        if config.public_url.is_some() {
            origins.insert(0, public.clone());
        }
        let users = config.htpasswd.as_deref().map(Htpasswd::load).transpose()?;
        let policy = Policy::new(
            config.admins.clone(),
            config.anonymous.clone(),
            config.default.clone(),
            config.access.clone(),
        )?
        .with_groups(config.groups.clone())?;
        let key_file = config
            .signing_key_file
            .clone()
            .unwrap_or_else(|| root.join("token.key"));
        let key = crate::auth::tokens::load_or_create_key(&key_file)?;
        let service = public
            .split_once("://")
            .map_or(public.as_str(), |p| p.1)
            .to_string();
        let issuer = Issuer::new(
            &key,
            service,
            format!("{public}/token"),
            config.token_ttl_seconds.unwrap_or(300),
        );
        let mut auth = Auth::new(
            policy,
            Some(users.unwrap_or_default()),
            Some(issuer),
            Some(meta),
            origins,
        );
        auth.external = config.token.as_ref().map(External::load).transpose()?;
        Ok(auth)
    }

    /// The registry's policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The token server; `None` on an open registry.
    pub fn issuer(&self) -> Option<&Issuer> {
        self.issuer.as_ref()
    }

    /// The `Origin`s that may write to `/api/v1`.
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// Who sent `credentials`, and what their bearer token grants:
    /// `Ok(Anonymous)` without credentials, `Err` for credentials that do
    /// not check out.
    pub async fn identify(
        &self,
        credentials: &Credentials,
    ) -> Result<(Subject, Option<Grant>), &'static str> {
        match (credentials, &self.issuer) {
            // An expired or forged session is no one (the page then asks
            // to log in).
            (Credentials::Session(token), Some(issuer)) => {
                Ok((self.session_subject(issuer, token).await, None))
            }
            (Credentials::Bearer(token), Some(issuer)) => {
                let (token, now) = (token.as_str(), unix_now());
                let mut grant = issuer
                    .verify(token, now)
                    .or_else(|| self.external.as_ref()?.verify(token, now))
                    .ok_or("invalid or expired token")?;
                // A key's token lives only as long as the key: a revoked
                // or expired key's tokens stop working at once.
                if let Subject::User(id) = &grant.subject {
                    if id.starts_with(API_KEY_PREFIX) {
                        let key = self
                            .key(id, None)
                            .await
                            .ok_or("the token's API key was revoked or has expired")?;
                        grant.subject = Subject::Key(key);
                    }
                }
                Ok((grant.subject.clone(), Some(grant)))
            }
            _ => Ok((self.authenticate(credentials).await?, None)),
        }
    }

    /// Who sent `credentials` as Basic ones: `Ok(Anonymous)` without any,
    /// `Err` for credentials that do not check out (a bearer token
    /// included: `/token` takes Basic only).
    pub async fn authenticate(&self, credentials: &Credentials) -> Result<Subject, &'static str> {
        // An open registry ignores credentials a client keeps for it.
        let Some(users) = &self.users else {
            return Ok(Subject::Anonymous);
        };
        let (user, password) = match credentials {
            Credentials::None | Credentials::Session(_) => return Ok(Subject::Anonymous),
            Credentials::Malformed(why) => return Err(why),
            Credentials::Bearer(_) => return Err(UNSUPPORTED_SCHEME),
            Credentials::Basic { user, password } => (user.as_str(), password.as_str()),
        };
        if user.starts_with(API_KEY_PREFIX) {
            return match self.key(user, Some(password)).await {
                Some(k) => Ok(Subject::Key(k)),
                None => Err(self.failed(user).await),
            };
        }
        let key: [u8; 32] = Sha256::new()
            .chain_update(user.len().to_le_bytes())
            .chain_update(user)
            .chain_update(password)
            .finalize()
            .into();
        let now = Instant::now();
        if let Some(at) = self.verified.lock().expect("verified lock").get(&key) {
            if now.duration_since(*at) < VERIFIED_TTL {
                return Ok(Subject::User(user.to_string()));
            }
        }
        let ok = match users.0.get(user) {
            Some(hash) => {
                let _permit = self.bcrypt.acquire().await.map_err(|_| "shutting down")?;
                let (hash, password) = (hash.clone(), password.to_string());
                tokio::task::spawn_blocking(move || {
                    bcrypt::verify(password, &hash).unwrap_or(false)
                })
                .await
                .unwrap_or(false)
            }
            None => false,
        };
        if !ok {
            return Err(self.failed(user).await);
        }
        let mut verified = self.verified.lock().expect("verified lock");
        if verified.len() >= MAX_VERIFIED {
            verified.retain(|_, at| now.duration_since(*at) < VERIFIED_TTL);
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
        }
        verified.insert(key, now);
        Ok(Subject::User(user.to_string()))
    }
}

impl Auth {
    /// Who a web session token names, if it checks out (a key's session
    /// ends with the key).
    async fn session_subject(&self, issuer: &Issuer, token: &str) -> Subject {
        match issuer.verify_session(token) {
            Some(Subject::User(id)) if id.starts_with(API_KEY_PREFIX) => {
                match self.key(&id, None).await {
                    Some(k) => Subject::Key(k),
                    None => Subject::Anonymous,
                }
            }
            Some(s) => s,
            None => Subject::Anonymous,
        }
    }

    /// A web session for `user` with `password` (checked as Basic
    /// credentials are): the signed token and its lifetime in seconds;
    /// `None` when the registry has no users to log in as.
    pub(crate) async fn session_for(
        &self,
        user: &str,
        password: &str,
    ) -> Result<Option<(String, u64)>, &'static str> {
        let (Some(_), Some(issuer)) = (&self.users, &self.issuer) else {
            return Ok(None);
        };
        let subject = self
            .authenticate(&Credentials::login(user, password))
            .await?;
        issuer.session(&subject, unix_now()).map(Some)
    }

    /// Counts, logs (the user name only) and delays a failed login.
    async fn failed(&self, user: &str) -> &'static str {
        metrics::counter!("sealvol_auth_failed_logins_total").increment(1);
        tracing::warn!(user, "failed login");
        // An async sleep: the delay holds no worker thread.
        tokio::time::sleep(FAILED_LOGIN_DELAY).await;
        "wrong user name or password"
    }

    /// The API key `id`, alive and with `secret` when given.
    pub(crate) async fn key(&self, id: &str, secret: Option<&str>) -> Option<Arc<KeyGrant>> {
        let meta = Arc::clone(self.meta.as_ref()?);
        let (id, secret) = (id.to_string(), secret.map(str::to_string));
        tokio::task::spawn_blocking(move || meta.key_grant(&id, secret.as_deref(), unix_now()))
            .await
            .ok()?
            .unwrap_or_else(|e| {
                tracing::error!("reading API keys: {e}");
                None
            })
    }
}

/// The scheme, host and port of an http(s) URL, as a browser's `Origin`.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert_eq!(
            origin_of("https://r.example.com/x").as_deref(),
            Some("https://r.example.com")
        );
        assert_eq!(
            origin_of("http://127.0.0.1:5000").as_deref(),
            Some("http://127.0.0.1:5000")
        );
        assert_eq!(origin_of("ftp://x"), None);
        assert_eq!(origin_of("https://"), None);
    }

    #[tokio::test]
    async fn basic_credentials_are_checked_and_cached() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = Htpasswd::parse(&format!("alice:{hash}")).unwrap();
        let auth = Auth::new(Policy::default(), Some(users), None, None, vec![]);
        let basic = |u: &str, p: &str| Credentials::Basic {
            user: u.into(),
            password: p.into(),
        };
        assert_eq!(
            auth.authenticate(&basic("alice", "s3cret")).await,
            Ok(Subject::User("alice".into()))
        );
        assert_eq!(auth.verified.lock().unwrap().len(), 1);
        assert_eq!(
            auth.authenticate(&basic("alice", "s3cret")).await,
            Ok(Subject::User("alice".into()))
        );
        assert!(auth.authenticate(&basic("alice", "wrong")).await.is_err());
        assert!(auth
            .authenticate(&basic("mallory", "s3cret"))
            .await
            .is_err());
        assert_eq!(
            auth.authenticate(&Credentials::None).await,
            Ok(Subject::Anonymous)
        );
    }
}
