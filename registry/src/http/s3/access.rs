//! Who an S3 request comes from and what it may do (SPEC.md §10.3): the
//! same subjects and policy as `/v2` (§7.5), reached through S3's own
//! credentials.
//!
//! - [`Signers`] hands `s3s` the secret an AWS signature is checked with.
//!   An access key id is an API key's id and its secret the key's secret,
//!   which the registry keeps sealed for this alone. Passwords of htpasswd
//!   users are kept as bcrypt hashes, from which no signature can be
//!   checked, so users sign with a key.
//! - [`Policy`] runs after the signature is checked: it names the subject
//!   (a key, or anonymous for an unsigned request), refuses writes, and
//!   asks the policy what the operation needs, as `http::access::need`
//!   does for `/v2`: pull on the volume a key names for object reads, a
//!   known subject for listings (which then show only what it may pull).
//!   The subject rides on to the operation as [`Who`].

use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{s3_error, S3Result};
use sealvol_spec::api::{Action, API_KEY_PREFIX};

use crate::auth::caller::denied_line;
use crate::auth::policy::Subject;
use crate::auth::Auth;
use crate::http::s3::addressing;
use crate::service::keys::{self, Signer};
use crate::state::app::App;

/// Why a write is refused.
pub const READ_ONLY: &str =
    "the S3 gateway is read-only: versions are written by sealvol push and sync";

/// The caller of an S3 operation, as [`Policy`] named it.
#[derive(Clone, Debug)]
pub struct Who(pub Subject);

/// The operations the gateway serves; every other one reads nothing a
/// volume holds, or writes.
const READS: [&str; 7] = [
    "ListBuckets",
    "ListObjectsV2",
    "ListObjects",
    "HeadBucket",
    "GetBucketLocation",
    "HeadObject",
    "GetObject",
];

/// The secrets of API keys, for checking signatures.
pub struct Signers {
    pub app: Arc<App>,
}

#[async_trait::async_trait]
impl S3Auth for Signers {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if !access_key.starts_with(API_KEY_PREFIX) {
            return Err(s3_error!(
                InvalidAccessKeyId,
                "the S3 gateway takes an API key's id as the access key id and its secret as the secret (sealvol admin key create)"
            ));
        }
        let found = keys::signer(&self.app, access_key).await.map_err(|e| {
            tracing::error!("reading API keys: {e}");
            s3_error!(InternalError, "cannot read API keys")
        })?;
        match found {
            Signer::Secret(s) => Ok(SecretKey::from(s)),
            Signer::NotKept => Err(s3_error!(
                InvalidAccessKeyId,
                "API key {access_key} was made before the registry kept what S3 signatures need; make a new key (sealvol admin key create) for S3 clients"
            )),
            Signer::Unknown => Err(s3_error!(
                InvalidAccessKeyId,
                "no API key {access_key}, or it has expired or was revoked"
            )),
        }
    }
}

/// The access decisions, made from the registry's policy.
pub struct Policy {
    pub auth: Arc<Auth>,
}

#[async_trait::async_trait]
impl S3Access for Policy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let subject = match cx.credentials() {
            None => Subject::Anonymous,
            // The signature checked out with the key's secret; the key
            // may have been revoked since, and its scope is read now.
            Some(c) => match self.auth.key(&c.access_key, None).await {
                Some(grant) => Subject::Key(grant),
                None => {
                    return Err(s3_error!(
                        InvalidAccessKeyId,
                        "API key {} has expired or was revoked",
                        c.access_key
                    ))
                }
            },
        };
        let op = cx.s3_op().name();
        // The router answers other methods before `s3s` sees them; this
        // holds wherever else the service is used.
        if !matches!(*cx.method(), http::Method::GET | http::Method::HEAD) {
            return Err(s3_error!(MethodNotAllowed, "{READ_ONLY}"));
        }
        let policy = self.auth.policy();
        let refuse = |repository: &str| {
            denied_line(&subject, repository, "pull");
            let who = match &subject {
                Subject::Anonymous => "anonymous callers".to_string(),
                s => s.name().to_string(),
            };
            let what = if repository.is_empty() {
                "read this registry".to_string()
            } else {
                format!("pull {repository}")
            };
            s3_error!(AccessDenied, "{who} may not {what}")
        };
        match cx.s3_path() {
            S3Path::Object { bucket, key } if READS.contains(&op) => {
                if let Some(k) = addressing::parse(bucket, key) {
                    if !policy.allows(&subject, &k.volume, Action::Pull) {
                        return Err(refuse(&k.volume));
                    }
                } else if !policy.knows(&subject) {
                    return Err(refuse(""));
                }
            }
            // Listings, and operations the gateway answers "not
            // implemented": a known subject, as `/v2/_catalog` needs.
            _ => {
                if !policy.knows(&subject) {
                    return Err(refuse(""));
                }
            }
        }
        cx.extensions_mut().insert(Who(subject));
        Ok(())
    }
}
