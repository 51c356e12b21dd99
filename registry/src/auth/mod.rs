//! Who is asking, and may they (SPEC.md §7.5): the `[auth]` section of
//! `registry.toml`, Basic credentials checked against an htpasswd file,
//! and the tower layers that run before every handler:
//!
//! - [`authorize`] authenticates the request, asks [`crate::http::access::need`]
//!   what it needs and [`Policy`] whether the caller has it, answers 401
//!   (with the challenge) or 403 `DENIED` itself, and otherwise hands the
//!   handler a [`Caller`] in the request's extensions, for the decisions
//!   that need a body or a stored record (sync jobs) and for filtering
//!   listings;
//! - [`csrf`] refuses `/api/v1` writes a web page could forge: no JSON
//!   content type (a CORS "simple request") or a foreign `Origin`.
//!
//! Credentials never reach a log line: a failed login logs the user name
//! only, and a denial logs subject, repository and action.

pub mod policy;
pub mod tokens;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::auth::policy::{AccessEntry, Policy, Subject};
use crate::auth::tokens::{External, ExternalConfig, Grant, Issuer};
use crate::error::{Code, RegistryError};
use crate::http::access::{self, Action, Need};
use crate::store::meta::keys::KeyGrant;
use crate::store::meta::MetaStore;
use sealvol_spec::api::API_KEY_PREFIX;

/// How long a successful password check is remembered.
const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// bcrypt checks that may run at once: each costs ~50-250 ms of a core.
const BCRYPT_AT_ONCE: usize = 2;
/// How long a failed login waits before it is answered.
const FAILED_LOGIN_DELAY: Duration = Duration::from_secs(1);
/// Largest htpasswd file read, and most entries remembered.
const MAX_HTPASSWD: u64 = 16 << 20;
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
    #[error("cannot read htpasswd file {path}: {message}")]
    Htpasswd { path: PathBuf, message: String },
    #[error("[auth] public_url {0:?} is not an http:// or https:// URL")]
    PublicUrl(String),
    #[error(transparent)]
    Policy(#[from] crate::auth::policy::PolicyError),
    #[error(transparent)]
    Token(#[from] crate::auth::tokens::TokenError),
}

/// The users of an htpasswd file: name -> bcrypt hash.
#[derive(Debug, Default)]
pub struct Htpasswd(HashMap<String, String>);

impl Htpasswd {
    pub fn load(path: &Path) -> Result<Htpasswd, AuthError> {
        let err = |message: String| AuthError::Htpasswd {
            path: path.to_path_buf(),
            message,
        };
        let len = std::fs::metadata(path)
            .map_err(|e| err(e.to_string()))?
            .len();
        if len > MAX_HTPASSWD {
            return Err(err(format!("larger than {MAX_HTPASSWD} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Htpasswd::parse(&text).map_err(err)
    }

    pub fn parse(text: &str) -> Result<Htpasswd, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (user, hash) = line
                .split_once(':')
                .ok_or_else(|| format!("line {}: not USER:HASH", i + 1))?;
            // Only bcrypt: MD5-crypt, SHA1 and plain entries are too weak
            // to accept, and distribution refuses them too.
            if !(hash.starts_with("$2y$") || hash.starts_with("$2b$") || hash.starts_with("$2a$")) {
                return Err(format!(
                    "line {}: user {user:?} is not a bcrypt entry (make it with htpasswd -B)",
                    i + 1
                ));
            }
            if user.starts_with(API_KEY_PREFIX) {
                return Err(format!(
                    "line {}: user names starting with {API_KEY_PREFIX} are API keys'",
                    i + 1
                ));
            }
            users.insert(user.to_string(), hash.to_string());
        }
        Ok(Htpasswd(users))
    }
}

/// The authentication and authorization state every request consults.
pub struct Auth {
    policy: Policy,
    users: Option<Htpasswd>,
    /// The token server; `None` on an open registry.
    issuer: Option<Issuer>,
    /// An external token issuer whose tokens are accepted too.
    external: Option<External>,
    /// Where API keys live; `None` on an open registry.
    meta: Option<Arc<MetaStore>>,
    /// The `Origin`s that may write to `/api/v1`.
    origins: Vec<String>,
    /// sha256(user, password) of recent successful checks -> when.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    bcrypt: Semaphore,
}

/// The authenticated caller, in each request's extensions.
#[derive(Clone, Debug)]
pub struct Caller {
    pub subject: Subject,
    /// What the caller's bearer token grants, when it sent one: the
    /// policy and the token must both allow an action.
    grant: Option<Grant>,
    auth: Arc<Auth>,
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

impl Caller {
    /// Whether the caller may do `action` to `repository`.
    pub fn may(&self, repository: &str, action: Action) -> bool {
        self.auth.policy.allows(&self.subject, repository, action)
            && self
                .grant
                .as_ref()
                .is_none_or(|g| g.grants(repository, action))
    }

    /// Whether a listing shows `repository` to the caller: what the policy
    /// lets it pull, whatever its token was scoped to.
    pub fn sees(&self, repository: &str) -> bool {
        self.auth
            .policy
            .allows(&self.subject, repository, Action::Pull)
    }

    pub fn is_admin(&self) -> bool {
        self.auth.policy.is_admin(&self.subject)
    }

    /// The registry's authentication state.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// Whether the registry checks credentials at all (else everyone is
    /// anonymous and the open policy decides).
    pub fn registry_authenticates(&self) -> bool {
        self.auth.users.is_some() || self.auth.issuer.is_some() || self.auth.external.is_some()
    }

    /// `Ok` when the caller may do `action` to `repository`, else the
    /// answer that says so (logged).
    pub fn check(&self, repository: &str, action: Action) -> Result<(), RegistryError> {
        if self.may(repository, action) {
            return Ok(());
        }
        denied_line(&self.subject, repository, action.as_str());
        Err(RegistryError::new(
            Code::Denied,
            format!(
                "{} may not {} {repository}",
                self.subject.name(),
                action.as_str()
            ),
        ))
    }
}

/// The caller a handler runs for. A handler reached without the auth
/// layer (never in `sealvol serve`) gets an anonymous caller with no
/// rights, so a missing layer fails closed.
pub fn caller(req: &Request) -> Caller {
    caller_of(req.extensions())
}

fn caller_of(extensions: &axum::http::Extensions) -> Caller {
    extensions.get::<Caller>().cloned().unwrap_or(Caller {
        subject: Subject::Anonymous,
        grant: None,
        auth: Arc::new(Auth::new(Policy::default(), None, None, None, Vec::new())),
    })
}

/// Handlers take the caller as an extractor.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Caller, Self::Rejection> {
        Ok(caller_of(&parts.extensions))
    }
}

fn denied_line(subject: &Subject, repository: &str, action: &str) {
    tracing::warn!(
        subject = subject.name(),
        repository,
        action,
        "access denied"
    );
}

impl Auth {
    fn new(
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

    /// Who sent `headers`, and what their bearer token grants:
    /// `Ok(Anonymous)` without credentials, `Err` for credentials that do
    /// not check out.
    async fn identify(
        &self,
        headers: &HeaderMap,
        web: bool,
    ) -> Result<(Subject, Option<Grant>), &'static str> {
        // The web view's pages send the session cookie instead of a
        // header; an expired or forged one is no one (the page then asks
        // to log in).
        if web && !headers.contains_key(header::AUTHORIZATION) {
            if let (Some(token), Some(issuer)) =
                (crate::http::ui::session::token_of(headers), &self.issuer)
            {
                return Ok((self.session_subject(issuer, token).await, None));
            }
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"));
        match (bearer, &self.issuer) {
            (Some((_, token)), Some(issuer)) => {
                let (token, now) = (token.trim(), unix_now());
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
            _ => Ok((self.authenticate(headers).await?, None)),
        }
    }

    /// Who sent `headers` with Basic credentials: `Ok(Anonymous)` without
    /// any, `Err` for credentials that do not check out.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Subject, &'static str> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(Subject::Anonymous);
        };
        // An open registry ignores credentials a client keeps for it.
        let Some(users) = &self.users else {
            return Ok(Subject::Anonymous);
        };
        let (user, password) = basic_credentials(value)?;
        let (user, password) = (user.as_str(), password.as_str());
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
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(&format!("Basic {basic}"))
            .map_err(|_| "malformed user name or password")?;
        headers.insert(header::AUTHORIZATION, value);
        let subject = self.authenticate(&headers).await?;
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
    async fn key(&self, id: &str, secret: Option<&str>) -> Option<Arc<KeyGrant>> {
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

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The token scope a request needing `need` asks for.
fn scope_of(need: &Need) -> Option<String> {
    match need {
        Need::Repository { name, action } => Some(match action {
            // Docker clients ask for both when they push.
            Action::Push => format!("repository:{name}:pull,push"),
            a => format!("repository:{name}:{}", a.as_str()),
        }),
        Need::Listing => Some("registry:catalog:*".into()),
        _ => None,
    }
}

impl Auth {
    /// 401 with the challenge a client answers by logging in: the token
    /// flow where the registry issues tokens, else Basic.
    fn unauthorized(&self, why: &str, need: &Need) -> Response {
        if let Need::Web { path } = need {
            // A page asks the browser to log in, not for a Basic dialog.
            let mut resp = StatusCode::SEE_OTHER.into_response();
            let to = format!("/ui/login?next={}", crate::http::query::encode(path));
            if let Ok(v) = HeaderValue::from_str(&to) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            return resp;
        }
        let mut resp = RegistryError::new(Code::Unauthorized, why).into_response();
        let challenge = match &self.issuer {
            Some(i) => i.challenge(scope_of(need).as_deref()),
            None => "Basic realm=\"sealvol\"".to_string(),
        };
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        resp
    }

    /// 403 `DENIED`, with the `insufficient_scope` challenge of RFC 6750
    /// where the registry issues tokens: clients that answer any 401 or
    /// 403 by asking for a token (oras-py) then see the refusal at once
    /// instead of retrying.
    fn forbidden(&self, why: String, need: &Need) -> Response {
        let mut resp = RegistryError::new(Code::Denied, why).into_response();
        if let Some(i) = &self.issuer {
            let challenge = format!(
                "{},error=\"insufficient_scope\"",
                i.challenge(scope_of(need).as_deref())
            );
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
        }
        resp
    }
}

/// The auth layer: authenticate, decide what the route needs, hand the
/// caller on.
pub async fn authorize(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let web = crate::http::ui::need(req.method(), &path).is_some();
    let get = req.method() == Method::GET;
    let need = access::need(req.method(), &path);
    // Where a page that needs a login sends the browser back to.
    let login = Need::Web { path };
    let (subject, grant) = match auth.identify(req.headers(), web).await {
        Ok(s) => s,
        Err(why) => return auth.unauthorized(why, if web { &login } else { &need }),
    };
    let policy = &auth.policy;
    // Anonymous callers are asked to log in, and so is a token that lacks
    // the scope (the client asks for another); known users are refused.
    let refuse = |repository: &str, action: &str, retry: bool| -> Response {
        denied_line(&subject, repository, action);
        match subject {
            Subject::Anonymous if web && get => {
                auth.unauthorized("authentication required", &login)
            }
            Subject::Anonymous => auth.unauthorized("authentication required", &need),
            _ if retry => auth.unauthorized("the token does not grant this", &need),
            _ => auth.forbidden(
                format!("{} may not {action} {repository}", subject.name()),
                &need,
            ),
        }
    };
    match &need {
        Need::Nothing | Need::Web { .. } => {}
        Need::Base | Need::Listing | Need::SyncJob(_) | Need::NewSync => {
            if !policy.knows(&subject) {
                return refuse("", "use", false);
            }
        }
        Need::Admin => {
            if !policy.is_admin(&subject) {
                return refuse("", "administer", false);
            }
        }
        Need::Repository { name, action } => {
            let (name, action) = (name.as_str(), *action);
            if !policy.allows(&subject, name, action) {
                return refuse(name, action.as_str(), false);
            }
            if grant.as_ref().is_some_and(|g| !g.grants(name, action)) {
                return refuse(name, action.as_str(), true);
            }
            // A cross-repository mount from a repository the caller may
            // not read becomes a plain upload, as in distribution.
            if let Some(from) = access::mount_source(req.uri().query()) {
                if !policy.allows(&subject, &from, Action::Pull) {
                    let path = req.uri().path().to_string();
                    if let Ok(uri) = path.parse() {
                        *req.uri_mut() = uri;
                    }
                }
            }
        }
    }
    req.extensions_mut().insert(Caller {
        subject,
        grant,
        auth: Arc::clone(&auth),
    });
    next.run(req).await
}

/// The user and password of a `Basic` `Authorization` value; `Err` says
/// what is wrong with it.
#[doc(hidden)] // pub for the fuzz targets (fuzz/)
pub fn basic_credentials(value: &HeaderValue) -> Result<(String, String), &'static str> {
    let value = value
        .to_str()
        .map_err(|_| "malformed Authorization header")?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("unsupported authorization scheme (use Basic or a token from /token)");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .map_err(|_| "malformed Basic credentials")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "malformed Basic credentials")?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or("malformed Basic credentials")?;
    Ok((user.to_string(), password.to_string()))
}

/// `GET /token` (Basic credentials, or none for what anonymous callers
/// may do) and `POST /token` (the OAuth2 password form): a token for the
/// scopes asked, as the distribution token spec answers.
pub async fn token(State(auth): State<Arc<Auth>>, req: Request) -> Response {
    let Some(issuer) = &auth.issuer else {
        return RegistryError::with_status(
            Code::Unsupported,
            StatusCode::NOT_FOUND,
            "this registry has no [auth]: no token is needed",
        )
        .into_response();
    };
    let basic_challenge = |why: &str| {
        let mut resp = RegistryError::new(Code::Unauthorized, why).into_response();
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"sealvol\""),
        );
        resp
    };
    let mut params: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let subject = if req.method() == Method::POST {
        let max = crate::http::limits::MAX_TOKEN_FORM;
        let body = match crate::http::limits::read_body(req.into_body(), max, Code::Invalid).await {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
        params.extend(form_urlencoded::parse(&body).into_owned());
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get("grant_type").as_deref() != Some("password") {
            return RegistryError::new(Code::Unsupported, "grant_type must be password")
                .into_response();
        }
        let (user, password) = (
            get("username").unwrap_or_default(),
            get("password").unwrap_or_default(),
        );
        let mut headers = HeaderMap::new();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        if let Ok(v) = HeaderValue::from_str(&format!("Basic {basic}")) {
            headers.insert(header::AUTHORIZATION, v);
        }
        match auth.authenticate(&headers).await {
            Ok(s) => s,
            Err(why) => return basic_challenge(why),
        }
    } else {
        match auth.authenticate(req.headers()).await {
            Ok(s) => s,
            Err(why) => return basic_challenge(why),
        }
    };
    if let Some((_, service)) = params.iter().find(|(k, _)| k == "service") {
        if service != issuer.service() {
            return RegistryError::new(
                Code::Denied,
                format!("tokens here are for service {:?}", issuer.service()),
            )
            .into_response();
        }
    }
    let scopes: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v.clone())
        .collect();
    match issuer.issue(&auth.policy, &subject, &scopes, unix_now()) {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(why) => RegistryError::with_status(Code::Unsupported, StatusCode::BAD_REQUEST, why)
            .into_response(),
    }
}

/// Refuses `/api/v1` requests a web page could send on the operator's
/// behalf (SPEC.md §7.5): writes without `Content-Type: application/json`
/// (a form or a `text/plain` fetch needs no preflight), and anything from
/// another origin.
pub async fn csrf(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if crate::http::ui::need(req.method(), path).is_some() {
        // A form post of the web view comes from one of its own pages:
        // browsers send the page's Origin with every POST.
        let read = req.method() == Method::GET || req.method() == Method::HEAD;
        let own = req
            .headers()
            .get(header::ORIGIN)
            .is_some_and(|o| auth.origins.iter().any(|a| a.as_bytes() == o.as_bytes()));
        if !read && !own {
            return RegistryError::new(
                Code::Denied,
                "a form of the web view is posted from its own pages only",
            )
            .into_response();
        }
        return next.run(req).await;
    }
    if path != "/api/v1" && !path.starts_with("/api/v1/") {
        return next.run(req).await;
    }
    let headers = req.headers();
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    let foreign = headers
        .get(header::ORIGIN)
        .is_some_and(|o| !auth.origins.iter().any(|a| a.as_bytes() == o.as_bytes()));
    if cross_site || foreign {
        return RegistryError::new(Code::Denied, "cross-origin requests are refused")
            .into_response();
    }
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        let essence = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        let secret_put = method == Method::PUT && path.starts_with("/api/v1/secrets/");
        let ok = match essence.as_deref() {
            Some("application/json") => true,
            Some("application/octet-stream") => secret_put,
            _ => false,
        };
        if !ok {
            let want = if secret_put {
                "application/octet-stream"
            } else {
                "application/json"
            };
            return RegistryError::with_status(
                Code::Unsupported,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("{method} {path} needs Content-Type: {want}"),
            )
            .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn htpasswd_takes_bcrypt_only() {
        let h = Htpasswd::parse(
            "# c\nalice:$2y$05$abcdefghijklmnopqrstuuF0GfGbTjOY2lWOdPDm6dvYjAhNSyXQa\n\n",
        )
        .unwrap();
        assert!(h.0.contains_key("alice"));
        assert!(Htpasswd::parse("bob:{SHA}abc")
            .unwrap_err()
            .contains("htpasswd -B"));
        assert!(Htpasswd::parse("bob").is_err());
    }

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
        let basic = |u: &str, p: &str| {
            let mut h = HeaderMap::new();
            let v = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            h.insert(header::AUTHORIZATION, format!("Basic {v}").parse().unwrap());
            h
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
            auth.authenticate(&HeaderMap::new()).await,
            Ok(Subject::Anonymous)
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any header value parses or is refused without panicking; a
        /// user (without `:`) and password round-trip through the header.
        #[test]
        fn basic_credentials_parse_any_header_and_round_trip(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            user in "[^:]{0,16}",
            password in "\\PC{0,16}",
        ) {
            if let Ok(v) = HeaderValue::from_bytes(&junk) {
                let _ = basic_credentials(&v);
            }
            let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let v = HeaderValue::from_str(&format!("Basic {b64}")).unwrap();
            proptest::prop_assert_eq!(basic_credentials(&v), Ok((user.clone(), password.clone())));
            // Another scheme, or base64 that lost its padding, is refused.
            let bearer = HeaderValue::from_str(&format!("Bearer {b64}")).unwrap();
            proptest::prop_assert!(basic_credentials(&bearer).is_err());
            if b64.ends_with('=') {
                let cut = HeaderValue::from_str(&format!("Basic {}", b64.trim_end_matches('='))).unwrap();
                proptest::prop_assert!(basic_credentials(&cut).is_err());
            }
        }
    }
}
