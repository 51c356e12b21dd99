//! Mirrors of a registry, configured as containerd configures them: a
//! hosts directory (`hosts_dir`, `/etc/containerd/certs.d` on a node) with
//! one folder per registry (`HOST[:PORT]`, or `_default` for any) holding a
//! `hosts.toml`:
//!
//! ```toml
//! [host."http://10.0.0.7:5000"]
//!   capabilities = ["pull", "resolve"]
//! [host."https://mirror.example.com"]
//!   capabilities = ["pull"]
//! ```
//!
//! Reads try the hosts in the file's order and the registry itself last;
//! a host that fails (unreachable, an error, a timeout, bytes that do not
//! hash to their digest) hands over to the next. Tags resolve only on
//! hosts with the `resolve` capability; blobs and manifests by digest come
//! from any host with `pull`, since every byte is checked against its
//! digest wherever it comes from. Writes always go to the registry.
//!
//! The CLI reads the directory named by `SEALVOL_HOSTS_DIR`; the
//! snapshotter its `hosts_dir` setting, so a node configures both at once.
//! Not supported (a clear error): a host URL with a path, TLS settings
//! (`ca`, `client`, `skip_verify`), `override_path` and `header`.

use std::path::{Path, PathBuf};

/// The variable naming the hosts directory for the CLI.
pub const HOSTS_DIR_ENV: &str = "SEALVOL_HOSTS_DIR";

/// One mirror of a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    /// `HOST[:PORT]`.
    pub host: String,
    /// `http://` (plain HTTP) rather than `https://`.
    pub plain_http: bool,
    /// May resolve tags.
    pub resolve: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct HostsError {
    pub file: PathBuf,
    pub message: String,
}

/// The hosts directory of the CLI: `SEALVOL_HOSTS_DIR`, if set.
pub fn dir_from_env() -> Option<PathBuf> {
    std::env::var_os(HOSTS_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The mirrors `dir` configures for `registry`, in order: its own
/// `hosts.toml`, else `_default`'s, else none. Hosts without `pull` are
/// left out (they serve pushes, which go to the registry anyway).
pub fn mirrors(dir: &Path, registry: &str) -> Result<Vec<Mirror>, HostsError> {
    for folder in [registry, "_default"] {
        let file = dir.join(folder).join("hosts.toml");
        match std::fs::read_to_string(&file) {
            Ok(text) => return parse(&text, &file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(HostsError {
                    file,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(Vec::new())
}

fn parse(text: &str, file: &Path) -> Result<Vec<Mirror>, HostsError> {
    let bad = |message: String| HostsError {
        file: file.to_path_buf(),
        message,
    };
    let doc: toml::Table = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let Some(hosts) = doc.get("host") else {
        return Ok(Vec::new());
    };
    let hosts = hosts
        .as_table()
        .ok_or_else(|| bad("`host` must be a table of [host.\"URL\"] sections".into()))?;
    let mut out = Vec::new();
    // The table keeps the file's order (toml's `preserve_order`).
    for (url, settings) in hosts {
        let settings = settings
            .as_table()
            .ok_or_else(|| bad(format!("[host.{url:?}] must be a table")))?;
        for key in settings.keys() {
            match key.as_str() {
                "capabilities" => {}
                "skip_verify" if settings[key].as_bool() == Some(false) => {}
                other => {
                    return Err(bad(format!(
                        "[host.{url:?}] {other} is not supported by sealvol (only capabilities)"
                    )))
                }
            }
        }
        let (plain_http, rest) = match url.split_once("://") {
            Some(("http", rest)) => (true, rest),
            Some(("https", rest)) => (false, rest),
            _ => {
                return Err(bad(format!(
                    "host {url:?} must be http://HOST[:PORT] or https://HOST[:PORT]"
                )))
            }
        };
        let host = rest.trim_end_matches('/');
        if host.is_empty() || host.contains('/') {
            return Err(bad(format!(
                "host {url:?}: a path is not supported; give http(s)://HOST[:PORT]"
            )));
        }
        let capabilities: Vec<&str> = match settings.get("capabilities") {
            None => vec!["pull", "resolve", "push"],
            Some(v) => v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(toml::Value::as_str)
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    bad(format!(
                        "[host.{url:?}] capabilities must be a list of strings"
                    ))
                })?,
        };
        if !capabilities.contains(&"pull") {
            continue;
        }
        out.push(Mirror {
            host: host.to_string(),
            plain_http,
            resolve: capabilities.contains(&"resolve"),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, folder: &str, text: &str) {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        std::fs::write(dir.join(folder).join("hosts.toml"), text).unwrap();
    }

    #[test]
    fn hosts_keep_their_order_and_capabilities() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "reg.example.com:5000",
            r#"
server = "https://reg.example.com:5000"
[host."https://zeta.example.com"]
  capabilities = ["pull"]
[host."http://10.0.0.7:5000/"]
  capabilities = ["pull", "resolve"]
[host."https://push-only.example.com"]
  capabilities = ["push"]
[host."https://alpha.example.com"]
"#,
        );
        let m = mirrors(dir.path(), "reg.example.com:5000").unwrap();
        let hosts: Vec<(&str, bool, bool)> = m
            .iter()
            .map(|m| (m.host.as_str(), m.plain_http, m.resolve))
            .collect();
        assert_eq!(
            hosts,
            [
                ("zeta.example.com", false, false),
                ("10.0.0.7:5000", true, true),
                ("alpha.example.com", false, true),
            ]
        );
        // Another registry: `_default`, else nothing.
        assert!(mirrors(dir.path(), "other.example.com").unwrap().is_empty());
        write(
            dir.path(),
            "_default",
            "[host.\"https://any.example.com\"]\n",
        );
        assert_eq!(
            mirrors(dir.path(), "other.example.com").unwrap()[0].host,
            "any.example.com"
        );
    }

    #[test]
    fn what_sealvol_cannot_honour_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for (text, says) in [
            (
                "[host.\"https://m.example.com/v2/prefix\"]\n",
                "a path is not supported",
            ),
            (
                "[host.\"https://m.example.com\"]\nca = \"/etc/ca.pem\"\n",
                "ca is not supported",
            ),
            (
                "[host.\"https://m.example.com\"]\nskip_verify = true\n",
                "skip_verify is not supported",
            ),
            ("[host.\"ftp://m.example.com\"]\n", "must be http://"),
            (
                "[host.\"https://m.example.com\"]\ncapabilities = \"pull\"\n",
                "list of strings",
            ),
        ] {
            write(dir.path(), "r.example.com", text);
            let e = mirrors(dir.path(), "r.example.com")
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
