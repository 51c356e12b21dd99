//! Scoped, expiring API keys (SPEC.md §7.5) for CI jobs and GPU nodes:
//! an admin creates one with repository globs and actions, the registry
//! shows its secret once, and the key logs in with Basic auth (user name:
//! its id) or through `/token`, like a user whose rights are exactly the
//! key's scope, never admin.
//!
//! A login checks the secret against its SHA-256. That is enough here,
//! unlike for passwords: the secret is 32 random bytes, so there is
//! nothing to guess from its hash. The S3 gateway's AWS signatures are
//! HMACs keyed by the secret itself, so a key also keeps its secret sealed
//! under the registry's secrets key (as sync secrets are), for that check
//! alone; keys made before it have no sealed secret and are refused there.

use std::io::Read;
use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use sealvol_spec::api::{self, Action, API_KEY_PREFIX};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::rfc3339;
use crate::store::meta::db::MetaStore;
use crate::store::meta::error::MetaError;
use crate::store::meta::schema::API_KEYS;
use crate::store::meta::secrets::{Sealed, SecretKey};

/// Most keys a registry holds, and most globs one key names.
const MAX_KEYS: usize = 10_000;
const MAX_GLOBS: usize = 64;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct KeyRecord {
    repositories: Vec<String>,
    actions: Vec<Action>,
    created_by: String,
    created_at: u64,
    expires_at: Option<u64>,
    /// Hex SHA-256 of the secret.
    secret_sha256: String,
    /// The secret, sealed for `api-key:ID`: what SigV4 checks need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret_sealed: Option<Sealed>,
}

/// What the S3 gateway may learn of a key's secret.
#[derive(Debug, PartialEq, Eq)]
pub enum KeySecret {
    Secret(String),
    /// The key was made before secrets were kept sealed.
    NotKept,
}

/// The name a key's secret is sealed for: a sealed secret moved to
/// another key's row does not open.
fn sealed_name(id: &str) -> String {
    format!("api-key:{id}")
}

impl KeyRecord {
    fn view(&self, id: &str) -> api::ApiKey {
        api::ApiKey {
            id: id.to_string(),
            repositories: self.repositories.clone(),
            actions: self.actions.clone(),
            created_by: self.created_by.clone(),
            created_at: rfc3339(self.created_at),
            expires_at: self.expires_at.map(rfc3339),
        }
    }
}

/// A key that logged in: what it may do.
#[derive(Debug)]
pub struct KeyGrant {
    pub id: String,
    repositories: GlobSet,
    actions: Vec<Action>,
}

impl PartialEq for KeyGrant {
    fn eq(&self, other: &KeyGrant) -> bool {
        self.id == other.id
    }
}
impl Eq for KeyGrant {}

impl KeyGrant {
    pub fn allows(&self, repository: &str, action: Action) -> bool {
        self.actions.contains(&action) && self.repositories.is_match(repository)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Invalid(String),
    #[error("no API key {0}")]
    Unknown(String),
    #[error(transparent)]
    Meta(#[from] MetaError),
}

crate::store::meta::error::from_redb!(KeyError, KeyError::Meta);

fn compile(patterns: &[String]) -> Result<GlobSet, KeyError> {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        let glob = GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| KeyError::Invalid(format!("repository pattern {p:?}: {}", e.kind())))?;
        set.add(glob);
    }
    set.build()
        .map_err(|e| KeyError::Invalid(format!("repository patterns: {e}")))
}

fn random_hex(n: usize) -> Result<String, KeyError> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut r| r.read_exact(&mut bytes))
        .map_err(|e| KeyError::Meta(MetaError(format!("cannot read random bytes: {e}"))))?;
    Ok(hex::encode(bytes))
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

impl MetaStore {
    /// Creates a key for `by`, its secret sealed under `sealing`; the
    /// answer holds its secret, shown once.
    pub fn create_key(
        &self,
        req: &api::ApiKeyRequest,
        expires_at: Option<u64>,
        by: &str,
        now: u64,
        sealing: &SecretKey,
    ) -> Result<api::NewApiKey, KeyError> {
        if req.repositories.is_empty() || req.repositories.len() > MAX_GLOBS {
            return Err(KeyError::Invalid(format!(
                "a key names 1 to {MAX_GLOBS} repository patterns"
            )));
        }
        if req.actions.is_empty() {
            return Err(KeyError::Invalid("a key needs at least one action".into()));
        }
        if expires_at.is_some_and(|t| t <= now) {
            return Err(KeyError::Invalid("expires_at is in the past".into()));
        }
        compile(&req.repositories)?;
        let id = format!("{API_KEY_PREFIX}{}", random_hex(8)?);
        let secret = random_hex(32)?;
        let mut actions = req.actions.clone();
        actions.sort();
        actions.dedup();
        let record = KeyRecord {
            repositories: req.repositories.clone(),
            actions,
            created_by: by.to_string(),
            created_at: now,
            expires_at,
            secret_sha256: sha256_hex(&secret),
            secret_sealed: Some(Sealed::seal(sealing, &sealed_name(&id), secret.as_bytes())),
        };
        let tx = self.db.begin_write()?;
        {
            let mut table = tx.open_table(API_KEYS)?;
            if table.len()? as usize >= MAX_KEYS {
                return Err(KeyError::Invalid(format!(
                    "this registry holds {MAX_KEYS} keys already; revoke some"
                )));
            }
            let json = serde_json::to_vec(&record)?;
            table.insert(id.as_str(), json.as_slice())?;
        }
        tx.commit()?;
        Ok(api::NewApiKey {
            key: record.view(&id),
            secret,
        })
    }

    /// Every key, by id.
    pub fn keys(&self) -> Result<Vec<api::ApiKey>, KeyError> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for row in tx.open_table(API_KEYS)?.iter()? {
            let (k, v) = row?;
            let r: KeyRecord = serde_json::from_slice(v.value())?;
            out.push(r.view(k.value()));
        }
        Ok(out)
    }

    pub fn delete_key(&self, id: &str) -> Result<(), KeyError> {
        let tx = self.db.begin_write()?;
        let removed = tx.open_table(API_KEYS)?.remove(id)?.is_some();
        tx.commit()?;
        if removed {
            Ok(())
        } else {
            Err(KeyError::Unknown(id.to_string()))
        }
    }

    /// The key `id` if it exists, has not expired, and (when `secret` is
    /// given) `secret` is its secret.
    pub fn key_grant(
        &self,
        id: &str,
        secret: Option<&str>,
        now: u64,
    ) -> Result<Option<Arc<KeyGrant>>, KeyError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(API_KEYS)?;
        let Some(v) = table.get(id)? else {
            return Ok(None);
        };
        let r: KeyRecord = serde_json::from_slice(v.value())?;
        if r.expires_at.is_some_and(|t| t <= now) {
            return Ok(None);
        }
        if secret.is_some_and(|s| sha256_hex(s) != r.secret_sha256) {
            return Ok(None);
        }
        Ok(Some(Arc::new(KeyGrant {
            id: id.to_string(),
            repositories: compile(&r.repositories)?,
            actions: r.actions,
        })))
    }
}

impl MetaStore {
    /// The secret of key `id`, opened with `sealing`, if the key exists
    /// and has not expired: for checking an AWS signature made with it.
    pub fn key_secret(
        &self,
        id: &str,
        now: u64,
        sealing: &SecretKey,
    ) -> Result<Option<KeySecret>, KeyError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(API_KEYS)?;
        let Some(v) = table.get(id)? else {
            return Ok(None);
        };
        let r: KeyRecord = serde_json::from_slice(v.value())?;
        if r.expires_at.is_some_and(|t| t <= now) {
            return Ok(None);
        }
        let Some(sealed) = &r.secret_sealed else {
            return Ok(Some(KeySecret::NotKept));
        };
        let secret = sealed
            .open(sealing, &sealed_name(id))
            .and_then(|s| String::from_utf8(s).ok())
            .ok_or_else(|| {
                KeyError::Meta(MetaError(format!(
                    "API key {id}'s secret does not open with this registry's secrets key; is secrets_key_file the one it was made with?"
                )))
            })?;
        // The sealed copy is the one the login hash was made of, unless
        // the row was edited: then neither is trusted.
        if sha256_hex(&secret) != r.secret_sha256 {
            return Ok(Some(KeySecret::NotKept));
        }
        Ok(Some(KeySecret::Secret(secret)))
    }
}

impl From<KeyError> for crate::error::RegistryError {
    fn from(e: KeyError) -> Self {
        use KeyError as K;
        match e {
            K::Invalid(why) => crate::error::RegistryError::new(crate::error::Code::Invalid, why),
            K::Unknown(_) => {
                crate::error::RegistryError::new(crate::error::Code::KeyUnknown, e.to_string())
            }
            K::Meta(m) => crate::error::RegistryError::internal(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealing() -> (tempfile::TempDir, SecretKey) {
        let dir = tempfile::tempdir().unwrap();
        let key = SecretKey::load_or_create(&dir.path().join("secrets.key")).unwrap();
        (dir, key)
    }

    #[test]
    fn a_key_keeps_its_secret_sealed_for_signature_checks_only() {
        let (_dir, meta) = MetaStore::temporary();
        let (_keys, sealing) = sealing();
        let req = api::ApiKeyRequest {
            repositories: vec!["weights/**".into()],
            actions: vec![Action::Pull],
            expires_at: None,
        };
        let k = meta
            .create_key(&req, Some(2_000), "admin", 1_000, &sealing)
            .unwrap();
        let id = k.key.id.as_str();
        assert_eq!(
            meta.key_secret(id, 1_500, &sealing).unwrap(),
            Some(KeySecret::Secret(k.secret.clone()))
        );
        // Expired, unknown: nothing.
        assert_eq!(meta.key_secret(id, 2_000, &sealing).unwrap(), None);
        assert_eq!(meta.key_secret("svk_00", 1_500, &sealing).unwrap(), None);
        // Another registry's secrets key opens nothing.
        let (_other, other) = self::sealing();
        assert!(meta.key_secret(id, 1_500, &other).is_err());
        // The secret never shows in what the API lists.
        let listed = serde_json::to_string(&meta.keys().unwrap()).unwrap();
        assert!(!listed.contains(&k.secret), "{listed}");
        // A row written before secrets were sealed: known, but not kept.
        let old = KeyRecord {
            repositories: req.repositories.clone(),
            actions: req.actions.clone(),
            created_by: "admin".into(),
            created_at: 1,
            expires_at: None,
            secret_sha256: sha256_hex("s"),
            secret_sealed: None,
        };
        let json = serde_json::to_vec(&old).unwrap();
        assert!(!String::from_utf8_lossy(&json).contains("secret_sealed"));
        let tx = meta.db.begin_write().unwrap();
        tx.open_table(API_KEYS)
            .unwrap()
            .insert("svk_old", json.as_slice())
            .unwrap();
        tx.commit().unwrap();
        assert_eq!(
            meta.key_secret("svk_old", 1_500, &sealing).unwrap(),
            Some(KeySecret::NotKept)
        );
        // And it still logs in with its secret.
        assert!(meta
            .key_grant("svk_old", Some("s"), 1_500)
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_key_logs_in_with_its_secret_until_it_expires_or_is_revoked() {
        let (_dir, meta) = MetaStore::temporary();
        let req = api::ApiKeyRequest {
            repositories: vec!["weights/**".into()],
            actions: vec![Action::Pull],
            expires_at: None,
        };
        let (_keys, sealing) = sealing();
        let k = meta
            .create_key(&req, Some(2_000), "admin", 1_000, &sealing)
            .unwrap();
        assert!(k.key.id.starts_with(API_KEY_PREFIX));
        let g = meta
            .key_grant(&k.key.id, Some(&k.secret), 1_500)
            .unwrap()
            .unwrap();
        assert!(g.allows("weights/a/b", Action::Pull));
        assert!(!g.allows("weights/a", Action::Push));
        assert!(!g.allows("other/a", Action::Pull));
        assert!(meta
            .key_grant(&k.key.id, Some("wrong"), 1_500)
            .unwrap()
            .is_none());
        assert!(meta
            .key_grant(&k.key.id, Some(&k.secret), 2_000)
            .unwrap()
            .is_none());
        assert_eq!(meta.keys().unwrap(), vec![k.key.clone()]);
        meta.delete_key(&k.key.id).unwrap();
        assert!(meta
            .key_grant(&k.key.id, Some(&k.secret), 1_500)
            .unwrap()
            .is_none());
        assert!(matches!(
            meta.delete_key(&k.key.id),
            Err(KeyError::Unknown(_))
        ));
        let bad = api::ApiKeyRequest {
            actions: vec![],
            ..req
        };
        assert!(matches!(
            meta.create_key(&bad, None, "admin", 1, &sealing),
            Err(KeyError::Invalid(_))
        ));
    }
}
