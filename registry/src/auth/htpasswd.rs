//! The users of an htpasswd file: bcrypt entries only, the format
//! distribution and zot read.

use std::collections::HashMap;
use std::path::Path;

use sealvol_spec::api::API_KEY_PREFIX;

/// An htpasswd file that cannot be read or is not bcrypt entries.
#[derive(Debug, thiserror::Error)]
#[error("cannot read htpasswd file {path}: {message}")]
pub struct HtpasswdError {
    pub path: std::path::PathBuf,
    pub message: String,
}

/// Largest htpasswd file read.
const MAX_HTPASSWD: u64 = 16 << 20;

/// The users of an htpasswd file: name -> bcrypt hash.
#[derive(Debug, Default)]
pub struct Htpasswd(pub(crate) HashMap<String, String>);

impl Htpasswd {
    pub fn load(path: &Path) -> Result<Htpasswd, HtpasswdError> {
        let err = |message: String| HtpasswdError {
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
}
