//! Every path the registry serves, parsed in one place and with no I/O:
//! `/v2` (the distribution API), `/api/v1` (the volume API), `/ui` (the
//! web view) and `/hf` (the Hugging Face Hub gateway). The access table (`http::access`), the body limits
//! (`http::layers`) and the handlers read the same [`Route`], so what a
//! request is checked for is what its handler does.

/// The endpoint a path names.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `/metrics`.
    Metrics,
    /// `/livez`, `/readyz`.
    Probe,
    /// `/token`.
    Token,
    Oci(Oci),
    Api(Api),
    Web(Web),
    Hf(Hf),
}

/// The endpoint `path` names; `None` for a path no handler serves.
pub fn route(path: &str) -> Option<Route> {
    match path {
        "/metrics" => return Some(Route::Metrics),
        "/livez" | "/readyz" => return Some(Route::Probe),
        "/token" => return Some(Route::Token),
        _ => {}
    }
    if let Some(w) = web(path) {
        return Some(Route::Web(w));
    }
    if let Some(h) = hf(path) {
        return Some(Route::Hf(h));
    }
    if let Some(r) = oci(path) {
        return Some(Route::Oci(r));
    }
    api(path).map(Route::Api)
}

/// The endpoint a `/hf/...` path names: the calls of the Hugging Face Hub
/// API that `huggingface_hub` downloads make (SPEC.md §9). `name` is the
/// repository id, which is the volume's name; segments are decoded as
/// the client encodes them (a revision `b3:…` arrives as `b3%3A…`).
#[derive(Debug, PartialEq, Eq)]
pub enum Hf {
    /// `/hf/api/models/NS/VOLUME[/revision/REV]`: the repository at a
    /// revision (`None`: the default one).
    Info {
        name: String,
        revision: Option<String>,
    },
    /// `/hf/api/models/NS/VOLUME/tree/REV[/PATH]`: a folder's listing.
    Tree {
        name: String,
        revision: String,
        path: String,
    },
    /// `/hf/NS/VOLUME/resolve/REV/PATH`: a file's bytes.
    Resolve {
        name: String,
        revision: String,
        path: String,
    },
}

pub fn hf(path: &str) -> Option<Hf> {
    let rest = path.strip_prefix("/hf/")?;
    let segs: Vec<String> = rest.split('/').map(crate::http::query::decode).collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let joined = |parts: &[&str]| parts.join("/").trim_matches('/').to_string();
    Some(match segs.as_slice() {
        ["api", "models", ns, vol] => Hf::Info {
            name: format!("{ns}/{vol}"),
            revision: None,
        },
        ["api", "models", ns, vol, "revision", rev] => Hf::Info {
            name: format!("{ns}/{vol}"),
            revision: Some(rev.to_string()),
        },
        ["api", "models", ns, vol, "tree", rev, path @ ..] => Hf::Tree {
            name: format!("{ns}/{vol}"),
            revision: rev.to_string(),
            path: joined(path),
        },
        [ns, vol, "resolve", rev, path @ ..] if !joined(path).is_empty() => Hf::Resolve {
            name: format!("{ns}/{vol}"),
            revision: rev.to_string(),
            path: joined(path),
        },
        _ => return None,
    })
}

/// The endpoint a `/v2/...` path names.
#[derive(Debug, PartialEq, Eq)]
pub enum Oci {
    Base,
    Catalog,
    Tags(String),
    Manifest(String, String),
    Blob(String, String),
    UploadStart(String),
    Upload(String, String),
    Referrers(String, String),
}

pub fn oci(path: &str) -> Option<Oci> {
    let rest = path.strip_prefix("/v2")?;
    if rest.is_empty() || rest == "/" {
        return Some(Oci::Base);
    }
    let rest = rest.strip_prefix('/')?;
    if rest == "_catalog" {
        return Some(Oci::Catalog);
    }
    let segs: Vec<&str> = rest.split('/').collect();
    let name = |n: usize| segs[..segs.len() - n].join("/");
    let len = segs.len();
    let tail = |i: usize| segs[len - i];
    Some(match segs.as_slice() {
        [.., "tags", "list"] if len > 2 => Oci::Tags(name(2)),
        [.., "blobs", "uploads", ""] if len > 3 => Oci::UploadStart(name(3)),
        [.., "blobs", "uploads"] if len > 2 => Oci::UploadStart(name(2)),
        [.., "blobs", "uploads", _] if len > 3 => Oci::Upload(name(3), tail(1).to_string()),
        [.., "manifests", _] if len > 2 => Oci::Manifest(name(2), tail(1).to_string()),
        [.., "blobs", _] if len > 2 => Oci::Blob(name(2), tail(1).to_string()),
        [.., "referrers", _] if len > 2 => Oci::Referrers(name(2), tail(1).to_string()),
        _ => return None,
    })
}

/// The endpoint a `/api/v1/...` path names; `http::api`'s routers serve
/// the same paths.
#[derive(Debug, PartialEq, Eq)]
pub enum Api {
    Root,
    Namespaces,
    Volumes,
    Gc,
    Volume(String),
    Versions(String),
    Version(String, String),
    Restore(String, String),
    Entries(String, String),
    Diff(String, String, String),
    Stats(String),
    Tag(String, String),
    Claim(String),
    ClaimToken(String, String),
    Syncs,
    Sync(String),
    SyncCancel(String),
    Schedules,
    Schedule(String),
    /// `schedules/ID/pause` and `…/resume`.
    SchedulePause(String),
    Secrets,
    Secret(String),
    Keys,
    Key(String),
    WhoAmI,
}

pub fn api(path: &str) -> Option<Api> {
    let rest = path.strip_prefix("/api/v1")?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    Some(match rest {
        "" => Api::Root,
        "namespaces" => Api::Namespaces,
        "volumes" => Api::Volumes,
        "gc" => Api::Gc,
        "syncs" => Api::Syncs,
        "schedules" => Api::Schedules,
        "secrets" => Api::Secrets,
        "keys" => Api::Keys,
        "whoami" => Api::WhoAmI,
        _ if rest.starts_with("syncs/") => {
            let sub = &rest["syncs/".len()..];
            match sub.split_once('/') {
                None => Api::Sync(sub.to_string()),
                Some((id, "cancel")) => Api::SyncCancel(id.to_string()),
                Some(_) => return None,
            }
        }
        _ if rest.starts_with("schedules/") => {
            let sub = &rest["schedules/".len()..];
            match sub.split_once('/') {
                None => Api::Schedule(sub.to_string()),
                Some((id, "pause" | "resume")) => Api::SchedulePause(id.to_string()),
                Some(_) => return None,
            }
        }
        _ if rest.starts_with("keys/") => {
            let id = &rest["keys/".len()..];
            if id.contains('/') {
                return None;
            }
            Api::Key(id.to_string())
        }
        _ if rest.starts_with("secrets/") => {
            let name = &rest["secrets/".len()..];
            if name.contains('/') {
                return None;
            }
            Api::Secret(name.to_string())
        }
        _ => {
            // Decoded as axum decodes the `{*path}` the handler reads, so
            // the access table checks the volume the handler acts on.
            let path = crate::http::query::decode(rest.strip_prefix("volumes/")?);
            let (name, sub) = split_volume_path(&path)?;
            match sub {
                RawSub::Volume => Api::Volume(name),
                RawSub::Versions => Api::Versions(name),
                RawSub::Version(d) => Api::Version(name, d),
                RawSub::Restore(d) => Api::Restore(name, d),
                RawSub::Entries(d) => Api::Entries(name, d),
                RawSub::Diff(a, b) => Api::Diff(name, a, b),
                RawSub::Stats => Api::Stats(name),
                RawSub::Tag(t) => Api::Tag(name, t),
                RawSub::Claim => Api::Claim(name),
                RawSub::ClaimToken(t) => Api::ClaimToken(name, t),
            }
        }
    })
}

/// What follows a volume's name, as the path spells it.
pub(crate) enum RawSub {
    Volume,
    Versions,
    Version(String),
    Restore(String),
    Entries(String),
    Diff(String, String),
    Stats,
    Tag(String),
    Claim,
    ClaimToken(String),
}

/// Splits `NAME[/-/SUB]` (the part after `/api/v1/volumes/`): a name holds
/// slashes, so the segment `-`, which no name component can be, ends it.
pub(crate) fn split_volume_path(path: &str) -> Option<(String, RawSub)> {
    let Some((name, sub)) = path.split_once("/-/") else {
        return Some((path.to_string(), RawSub::Volume));
    };
    let segs: Vec<&str> = sub.split('/').collect();
    let sub = match segs.as_slice() {
        ["versions"] => RawSub::Versions,
        ["versions", d] => RawSub::Version(d.to_string()),
        ["versions", d, "restore"] => RawSub::Restore(d.to_string()),
        ["versions", d, "entries"] => RawSub::Entries(d.to_string()),
        ["versions", a, "diff", b] => RawSub::Diff(a.to_string(), b.to_string()),
        ["stats"] => RawSub::Stats,
        ["tags", t] => RawSub::Tag(t.to_string()),
        ["claim"] => RawSub::Claim,
        ["claim", t] => RawSub::ClaimToken(t.to_string()),
        _ => return None,
    };
    Some((name.to_string(), sub))
}

/// The endpoint a `/ui/...` path names; `http::ui` serves the same paths.
#[derive(Debug, PartialEq, Eq)]
pub enum Web {
    Home,
    /// `login`, `logout`.
    Login,
    Static,
    Syncs,
    Sync,
    SyncCancel,
    /// `syncs/ID/...` other than `cancel`.
    SyncOther,
    /// `volumes/NAME[/-/...]`, decoded.
    Volume(String, WebSub),
}

/// `None` for a path outside `/ui`, and for a `/ui/` path the view does
/// not know (it then needs nothing of the auth layer, as any unknown path).
pub fn web(path: &str) -> Option<Web> {
    let rest = path.strip_prefix("/ui")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    Some(match rest {
        "" => Web::Home,
        "login" | "logout" => Web::Login,
        _ if rest.starts_with("static/") => Web::Static,
        "syncs" => Web::Syncs,
        _ if rest.starts_with("syncs/") => match rest["syncs/".len()..].split_once('/') {
            None => Web::Sync,
            Some((_, "cancel")) => Web::SyncCancel,
            Some(_) => Web::SyncOther,
        },
        _ => {
            let path = crate::http::query::decode(rest.strip_prefix("volumes/")?);
            let (name, sub) = split_web_volume(&path);
            Web::Volume(name, sub)
        }
    })
}

/// What follows a volume's name in a `/ui/volumes/` path.
#[derive(Debug, PartialEq, Eq)]
pub enum WebSub {
    Volume,
    Version(String),
    Delete(String),
    Restore(String),
    Diff,
    Tags,
    Unknown,
}

/// `NAME[/-/…]`, split at the `-` segment as the API's paths are.
pub fn split_web_volume(path: &str) -> (String, WebSub) {
    let Some((name, sub)) = path.split_once("/-/") else {
        return (path.trim_end_matches('/').to_string(), WebSub::Volume);
    };
    let segs: Vec<&str> = sub.split('/').collect();
    let sub = match segs.as_slice() {
        ["versions", d] => WebSub::Version(d.to_string()),
        ["versions", d, "delete"] => WebSub::Delete(d.to_string()),
        ["versions", d, "restore"] => WebSub::Restore(d.to_string()),
        ["diff"] => WebSub::Diff,
        ["tags"] => WebSub::Tags,
        _ => WebSub::Unknown,
    };
    (name.to_string(), sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_routes_decode_what_the_client_encodes() {
        let info = |name: &str, revision: Option<&str>| {
            Some(Hf::Info {
                name: name.into(),
                revision: revision.map(Into::into),
            })
        };
        assert_eq!(hf("/hf/api/models/w/q"), info("w/q", None));
        assert_eq!(
            hf("/hf/api/models/w/q/revision/b3%3A00ff"),
            info("w/q", Some("b3:00ff"))
        );
        assert_eq!(
            hf("/hf/api/models/w/q/tree/main"),
            Some(Hf::Tree {
                name: "w/q".into(),
                revision: "main".into(),
                path: "".into()
            })
        );
        assert_eq!(
            hf("/hf/api/models/w/q/tree/prod/sub%2Fdir"),
            Some(Hf::Tree {
                name: "w/q".into(),
                revision: "prod".into(),
                path: "sub/dir".into()
            })
        );
        assert_eq!(
            hf("/hf/w/q/resolve/b3%3A00/a/b%20c.json"),
            Some(Hf::Resolve {
                name: "w/q".into(),
                revision: "b3:00".into(),
                path: "a/b c.json".into()
            })
        );
        assert_eq!(hf("/hf/w/q/resolve/main"), None);
        assert_eq!(hf("/hf/w/q/resolve/main/"), None);
        assert_eq!(hf("/hf/api/models/w"), None);
        assert_eq!(hf("/hf/api/datasets/w/q"), None);
        assert_eq!(hf("/hfx/w/q/resolve/main/a"), None);
        assert!(matches!(
            route("/hf/w/q/resolve/main/a"),
            Some(Route::Hf(_))
        ));
    }

    #[test]
    fn routes_with_slashes_in_names() {
        assert_eq!(oci("/v2/"), Some(Oci::Base));
        assert_eq!(oci("/v2/a/b/tags/list"), Some(Oci::Tags("a/b".into())));
        assert_eq!(
            oci("/v2/a/blobs/uploads/"),
            Some(Oci::UploadStart("a".into()))
        );
        assert_eq!(
            oci("/v2/a/b/blobs/uploads/xyz"),
            Some(Oci::Upload("a/b".into(), "xyz".into()))
        );
        assert_eq!(
            oci("/v2/a/blobs/b/blobs/sha256:00"),
            Some(Oci::Blob("a/blobs/b".into(), "sha256:00".into()))
        );
        assert_eq!(
            oci("/v2/a/manifests/latest"),
            Some(Oci::Manifest("a".into(), "latest".into()))
        );
        assert_eq!(
            oci("/v2/a/referrers/sha256:00"),
            Some(Oci::Referrers("a".into(), "sha256:00".into()))
        );
        assert_eq!(oci("/v2/manifests/x"), None);
        assert_eq!(oci("/v3/a/manifests/x"), None);
    }

    #[test]
    fn routes_split_names_at_the_dash_segment() {
        assert_eq!(api("/api/v1"), Some(Api::Root));
        assert_eq!(api("/api/v1/"), Some(Api::Root));
        assert_eq!(
            api("/api/v1/volumes/a/versions"),
            Some(Api::Volume("a/versions".into()))
        );
        assert_eq!(
            api("/api/v1/volumes/w/a/-/versions"),
            Some(Api::Versions("w/a".into()))
        );
        assert_eq!(
            api("/api/v1/volumes/w/a/b/-/versions/b3:00/restore"),
            Some(Api::Restore("w/a/b".into(), "b3:00".into()))
        );
        assert_eq!(
            api("/api/v1/volumes/w/a/-/tags/prod"),
            Some(Api::Tag("w/a".into(), "prod".into()))
        );
        assert_eq!(
            api("/api/v1/volumes/w/a/-/claim/tok"),
            Some(Api::ClaimToken("w/a".into(), "tok".into()))
        );
        assert_eq!(api("/api/v1/volumes/w/a/-/nope"), None);
        assert_eq!(api("/api/v2/volumes"), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any path routes or not without panicking; a repository name
        /// with slashes comes back whole.
        #[test]
        fn routes_take_any_path_and_keep_names(
            path in "/v2/\\PC{0,40}",
            name in "[a-z0-9]{1,5}(/[a-z0-9]{1,5}){0,3}",
            tag in "[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}",
        ) {
            let _ = oci(&path);
            proptest::prop_assert_eq!(
                oci(&format!("/v2/{name}/manifests/{tag}")),
                Some(Oci::Manifest(name.clone(), tag.clone()))
            );
            proptest::prop_assert_eq!(oci(&format!("/v2/{name}/tags/list")), Some(Oci::Tags(name.clone())));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any path splits or not without panicking; a name and what
        /// follows it come back apart.
        #[test]
        fn volume_paths_split_at_the_dash_segment(
            any in "\\PC{0,40}",
            name in "[a-z0-9]{1,5}(/[a-z0-9]{1,5}){1,3}",
            tag in "[a-z0-9]{1,8}",
        ) {
            let _ = split_volume_path(&any);
            let _ = api(&format!("/api/v1/{any}"));
            let split = split_volume_path(&format!("{name}/-/tags/{tag}"));
            proptest::prop_assert!(matches!(split, Some((n, RawSub::Tag(t))) if n == name && t == tag));
            proptest::prop_assert!(matches!(split_volume_path(&name), Some((n, RawSub::Volume)) if n == name));
            let longer = format!("{name}/-/tags/{tag}/x");
            proptest::prop_assert!(split_volume_path(&longer).is_none());
        }
    }
}
