//! Registry credentials the way docker, skopeo and oras find them: the
//! `auths` and `credHelpers`/`credsStore` entries of `~/.docker/config.json`
//! (or `$DOCKER_CONFIG/config.json`). Reading goes through the
//! `docker_credential` crate; `sealvol login` writes an `auths` entry the
//! same tools read back.

use std::path::{Path, PathBuf};

use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::secrets::RegistryAuth;

use crate::TransportError;

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
pub fn config_path() -> Option<PathBuf> {
    std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")))
        .map(|d| d.join("config.json"))
}

/// The credential configured for `registry` (`host[:port]`), or anonymous
/// access when none is. A helper that fails is an error: silently falling
/// back to anonymous would turn it into a confusing "denied" later.
pub fn auth_for(registry: &str) -> Result<RegistryAuth, TransportError> {
    // docker_credential reports a file it cannot parse like a missing one;
    // a broken file must not turn into anonymous access.
    if let Some(path) = config_path() {
        if let Ok(bytes) = std::fs::read(&path) {
            if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                return Err(TransportError::Credentials(format!(
                    "{} is not valid JSON ({e}); fix it or move it away",
                    path.display()
                )));
            }
        }
    }
    match docker_credential::get_credential(registry) {
        Ok(DockerCredential::UsernamePassword(user, password)) => {
            Ok(RegistryAuth::Basic(user, password))
        }
        Ok(DockerCredential::IdentityToken(_)) => Err(TransportError::Credentials(format!(
            "{registry}: identity tokens in docker's config.json are not supported; run `sealvol login {registry}` with a user name and password or token"
        ))),
        Err(
            CredentialRetrievalError::NoCredentialConfigured
            | CredentialRetrievalError::ConfigNotFound
            | CredentialRetrievalError::ConfigReadError,
        ) => Ok(RegistryAuth::Anonymous),
        Err(e) => Err(TransportError::Credentials(format!(
            "{registry}: reading credentials from {}: {}",
            config_path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "docker's config.json".into()),
            e.to_string().lines().next().unwrap_or_default()
        ))),
    }
}

/// Stores `user`/`password` for `registry` in the `auths` section of
/// docker's config.json, keeping every other entry. The file is replaced
/// atomically and is readable only by its owner, as docker writes it.
pub fn store(registry: &str, user: &str, password: &str) -> Result<PathBuf, TransportError> {
    use base64::Engine as _;
    let path = config_path().ok_or_else(|| {
        TransportError::Credentials("neither DOCKER_CONFIG nor HOME is set".into())
    })?;
    let io = |e: std::io::Error| TransportError::Credentials(format!("{}: {e}", path.display()));
    let mut config: serde_json::Value = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            TransportError::Credentials(format!("{} is not valid JSON: {e}", path.display()))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(e) => return Err(io(e)),
    };
    let root = config.as_object_mut().ok_or_else(|| {
        TransportError::Credentials(format!("{} is not a JSON object", path.display()))
    })?;
    let auths = root
        .entry("auths")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| {
            TransportError::Credentials(format!("{}: `auths` is not an object", path.display()))
        })?;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    auths.insert(registry.to_string(), serde_json::json!({ "auth": token }));

    // Write through a symlinked config.json (dotfile setups), as docker does.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let io = |e: std::io::Error| TransportError::Credentials(format!("{}: {e}", path.display()));
    let dir = path.parent().expect("config path has a parent");
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    tmp.write_all(&serde_json::to_vec_pretty(&config).expect("JSON value serializes"))
        .map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(&path).map_err(|e| io(e.error))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    // DOCKER_CONFIG is process-wide, so the cases run in one test.
    #[test]
    fn store_then_read_back_keeps_other_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"auths":{"other:1":{"auth":"dTpw"}},"experimental":"enabled"}"#,
        )
        .unwrap();
        std::env::set_var("DOCKER_CONFIG", dir.path());
        assert!(matches!(
            auth_for("nobody:5000").unwrap(),
            RegistryAuth::Anonymous
        ));
        store("127.0.0.1:5000", "alice", "s3:cret").unwrap();
        match auth_for("127.0.0.1:5000").unwrap() {
            RegistryAuth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("alice", "s3:cret")),
            other => panic!("expected basic auth, got {other:?}"),
        }
        match auth_for("other:1").unwrap() {
            RegistryAuth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("u", "p")),
            other => panic!("expected basic auth, got {other:?}"),
        }
        let text = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
        assert!(text.contains("experimental"), "{text}");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("config.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // A symlinked config.json is written through, not replaced.
        let target = dir.path().join("dotfile.json");
        std::fs::rename(dir.path().join("config.json"), &target).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("config.json")).unwrap();
        store("other:2", "bob", "pw").unwrap();
        assert!(std::fs::symlink_metadata(dir.path().join("config.json"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::read_to_string(&target)
            .unwrap()
            .contains("other:2"));

        // A broken file is an error, not anonymous access.
        std::fs::write(&target, b"{not json").unwrap();
        assert!(matches!(
            auth_for("127.0.0.1:5000"),
            Err(TransportError::Credentials(m)) if m.contains("not valid JSON")
        ));
        std::env::remove_var("DOCKER_CONFIG");
    }
}
