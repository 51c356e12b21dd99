//! What a request needs before it may run (SPEC.md §7.5): one pure
//! function from a request's method and path to the repository and action
//! it touches. The auth layer decides with it before any handler runs;
//! the handlers whose repository is in the body or in a stored record
//! (sync jobs) decide with the same [`Action`]s through
//! [`crate::auth::Caller::may`].

use axum::http::Method;

use crate::http::routes::{route, Api, Hf, Oci, Route, Web, WebSub};

pub use sealvol_spec::api::Action;

/// The permission a request needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// The API roots (`/v2/`, `/api/v1`) and `/metrics`: anyone the
    /// registry knows, or anonymous when the policy grants anonymous
    /// callers anything; a client learns here whether to log in.
    Base,
    /// `action` on repository `name`.
    Repository { name: String, action: Action },
    /// A listing (catalog, namespaces, volumes, sync jobs): allowed to
    /// anyone [`Need::Base`] allows, filtered to what the caller may pull.
    Listing,
    /// A sync job or schedule by id: the handler reads its destination and
    /// asks for `action` on it.
    SyncJob(Action),
    /// A new sync job or schedule: the handler asks for `push` on the
    /// body's destination.
    NewSync,
    /// Garbage collection, secrets, API keys.
    Admin,
    /// A path no handler serves: let it through to its 404.
    Nothing,
    /// Not a need: the web view page at `path`, which a browser that must
    /// log in is sent back to (the auth layer's redirect).
    Web { path: String },
}

/// What `method path` needs. Pure, so the auth layer and the tests agree
/// with the handlers on every route.
pub fn need(method: &Method, path: &str) -> Need {
    use Action::*;
    let read = method == Method::GET || method == Method::HEAD;
    let repo = |name: String, action: Action| Need::Repository { name, action };
    match route(path) {
        None | Some(Route::Token | Route::Probe) => Need::Nothing,
        Some(Route::Metrics) => Need::Base,
        Some(Route::Web(w)) => match w {
            Web::Home => Need::Listing,
            Web::Login | Web::Static | Web::SyncOther => Need::Nothing,
            Web::Syncs if read => Need::Listing,
            Web::Syncs => Need::NewSync,
            Web::Sync => Need::SyncJob(Pull),
            Web::SyncCancel => Need::SyncJob(Push),
            Web::Volume(name, sub) => match (sub, read) {
                (WebSub::Volume | WebSub::Version(_) | WebSub::Diff, true) => repo(name, Pull),
                (WebSub::Delete(_), _) | (WebSub::Restore(_), false) => repo(name, Delete),
                (WebSub::Tags, false) => repo(name, Push),
                _ => Need::Nothing,
            },
        },
        // The Hub gateway only reads: pull, as a blob GET. Its handler
        // answers other methods 405.
        Some(Route::Hf(
            Hf::Info { name, .. } | Hf::Tree { name, .. } | Hf::Resolve { name, .. },
        )) => {
            if read {
                repo(name, Pull)
            } else {
                Need::Nothing
            }
        }
        Some(Route::Oci(r)) => {
            use Oci as R;
            match r {
                R::Base => Need::Base,
                R::Catalog => Need::Listing,
                R::Tags(n) | R::Referrers(n, _) => repo(n, Pull),
                R::Manifest(n, _) | R::Blob(n, _) => match *method {
                    Method::DELETE => repo(n, Delete),
                    _ if read => repo(n, Pull),
                    _ => repo(n, Push),
                },
                // Cancelling an upload is part of pushing, not deleting.
                R::UploadStart(n) | R::Upload(n, _) => repo(n, Push),
            }
        }
        Some(Route::Api(r)) => {
            use Api as R;
            match r {
                R::Root => Need::Base,
                R::Namespaces | R::Volumes | R::Syncs | R::Schedules if read => Need::Listing,
                R::Syncs | R::Schedules => Need::NewSync,
                R::Sync(_) => Need::SyncJob(Pull),
                R::Schedule(_) if read => Need::SyncJob(Pull),
                R::SyncCancel(_) | R::Schedule(_) | R::SchedulePause(_) => Need::SyncJob(Push),
                R::Gc | R::Secrets | R::Secret(_) | R::Keys | R::Key(_) => Need::Admin,
                R::Namespaces | R::Volumes => Need::Nothing,
                R::WhoAmI => Need::Base,
                R::Volume(n) | R::Versions(n) | R::Version(n, _) | R::Tag(n, _) if read => {
                    repo(n, Pull)
                }
                R::Entries(n, _) | R::Diff(n, _, _) | R::Stats(n) => repo(n, Pull),
                R::Volume(n) | R::Version(n, _) | R::Restore(n, _) => repo(n, Delete),
                R::Tag(n, _) if *method == Method::DELETE => repo(n, Delete),
                R::Tag(n, _) | R::Claim(n) | R::ClaimToken(n, _) => repo(n, Push),
                R::Versions(n) => repo(n, Pull),
            }
        }
    }
}

/// The repository a cross-repository mount reads (`?mount=D&from=REPO`
/// on an upload start), which the caller must be allowed to pull.
pub fn mount_source(query: Option<&str>) -> Option<String> {
    // Decoded as the upload handler decodes it, so both mean one repository.
    crate::http::query::param(query, "mount")?;
    crate::http::query::param(query, "from")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(m: Method, p: &str) -> Need {
        need(&m, p)
    }
    fn repo(name: &str, action: Action) -> Need {
        Need::Repository {
            name: name.into(),
            action,
        }
    }

    #[test]
    fn oci_routes() {
        use Action::*;
        assert_eq!(n(Method::GET, "/v2/"), Need::Base);
        assert_eq!(n(Method::GET, "/v2/_catalog"), Need::Listing);
        assert_eq!(n(Method::GET, "/v2/w/a/tags/list"), repo("w/a", Pull));
        assert_eq!(n(Method::HEAD, "/v2/w/a/manifests/x"), repo("w/a", Pull));
        assert_eq!(n(Method::PUT, "/v2/w/a/manifests/x"), repo("w/a", Push));
        assert_eq!(
            n(Method::DELETE, "/v2/w/a/manifests/x"),
            repo("w/a", Delete)
        );
        assert_eq!(n(Method::GET, "/v2/w/a/blobs/sha256:00"), repo("w/a", Pull));
        assert_eq!(
            n(Method::DELETE, "/v2/w/a/blobs/sha256:00"),
            repo("w/a", Delete)
        );
        assert_eq!(n(Method::POST, "/v2/w/a/blobs/uploads/"), repo("w/a", Push));
        assert_eq!(
            n(Method::PATCH, "/v2/w/a/blobs/uploads/u"),
            repo("w/a", Push)
        );
        assert_eq!(
            n(Method::DELETE, "/v2/w/a/blobs/uploads/u"),
            repo("w/a", Push)
        );
        assert_eq!(
            n(Method::GET, "/v2/w/a/referrers/sha256:00"),
            repo("w/a", Pull)
        );
        assert_eq!(n(Method::GET, "/v3/"), Need::Nothing);
        assert_eq!(n(Method::GET, "/metrics"), Need::Base);
        assert_eq!(n(Method::GET, "/livez"), Need::Nothing);
        assert_eq!(n(Method::GET, "/readyz"), Need::Nothing);
    }

    #[test]
    fn volume_api_routes() {
        use Action::*;
        assert_eq!(n(Method::GET, "/api/v1"), Need::Base);
        assert_eq!(n(Method::GET, "/api/v1/namespaces"), Need::Listing);
        assert_eq!(n(Method::GET, "/api/v1/volumes"), Need::Listing);
        assert_eq!(n(Method::POST, "/api/v1/gc"), Need::Admin);
        assert_eq!(n(Method::GET, "/api/v1/secrets"), Need::Admin);
        assert_eq!(n(Method::PUT, "/api/v1/secrets/s"), Need::Admin);
        assert_eq!(n(Method::GET, "/api/v1/keys"), Need::Admin);
        assert_eq!(n(Method::POST, "/api/v1/keys"), Need::Admin);
        assert_eq!(n(Method::DELETE, "/api/v1/keys/svk_00"), Need::Admin);
        assert_eq!(n(Method::GET, "/api/v1/schedules"), Need::Listing);
        assert_eq!(n(Method::POST, "/api/v1/schedules"), Need::NewSync);
        assert_eq!(n(Method::GET, "/api/v1/schedules/s"), Need::SyncJob(Pull));
        for (m, p) in [
            (Method::DELETE, "/api/v1/schedules/s"),
            (Method::POST, "/api/v1/schedules/s/pause"),
            (Method::POST, "/api/v1/schedules/s/resume"),
        ] {
            assert_eq!(n(m, p), Need::SyncJob(Push), "{p}");
        }
        assert_eq!(n(Method::POST, "/api/v1/schedules/s/run"), Need::Nothing);
        assert_eq!(n(Method::GET, "/api/v1/syncs"), Need::Listing);
        assert_eq!(n(Method::POST, "/api/v1/syncs"), Need::NewSync);
        assert_eq!(n(Method::GET, "/api/v1/syncs/j"), Need::SyncJob(Pull));
        assert_eq!(
            n(Method::POST, "/api/v1/syncs/j/cancel"),
            Need::SyncJob(Push)
        );
        assert_eq!(n(Method::GET, "/api/v1/volumes/w/a"), repo("w/a", Pull));
        assert_eq!(n(Method::PATCH, "/api/v1/volumes/w/a"), repo("w/a", Delete));
        assert_eq!(
            n(Method::DELETE, "/api/v1/volumes/w/a"),
            repo("w/a", Delete)
        );
        assert_eq!(
            n(Method::GET, "/api/v1/volumes/w/a/-/versions"),
            repo("w/a", Pull)
        );
        assert_eq!(
            n(Method::DELETE, "/api/v1/volumes/w/a/-/versions/b3:00"),
            repo("w/a", Delete)
        );
        assert_eq!(
            n(Method::POST, "/api/v1/volumes/w/a/-/versions/b3:00/restore"),
            repo("w/a", Delete)
        );
        assert_eq!(
            n(Method::PUT, "/api/v1/volumes/w/a/-/tags/prod"),
            repo("w/a", Push)
        );
        assert_eq!(
            n(Method::DELETE, "/api/v1/volumes/w/a/-/tags/prod"),
            repo("w/a", Delete)
        );
        assert_eq!(
            n(Method::POST, "/api/v1/volumes/w/a/-/claim"),
            repo("w/a", Push)
        );
        assert_eq!(
            n(Method::DELETE, "/api/v1/volumes/w/a/-/claim/t"),
            repo("w/a", Push)
        );
    }

    #[test]
    fn hub_routes_need_pull_to_read_and_nothing_else() {
        use Action::*;
        for p in [
            "/hf/api/models/w/a",
            "/hf/api/models/w/a/revision/main",
            "/hf/api/models/w/a/tree/b3%3A00/sub",
            "/hf/w/a/resolve/prod/config.json",
        ] {
            assert_eq!(n(Method::GET, p), repo("w/a", Pull), "{p}");
            assert_eq!(n(Method::HEAD, p), repo("w/a", Pull), "{p}");
            assert_eq!(n(Method::PUT, p), Need::Nothing, "{p}");
        }
        // An escaped slash names the volume the handler reads.
        assert_eq!(
            n(Method::GET, "/hf/w%2Fa/b/resolve/main/f"),
            repo("w/a/b", Pull)
        );
        assert_eq!(n(Method::GET, "/hf/w/a/blob/main/f"), Need::Nothing);
    }

    #[test]
    fn mount_sources() {
        assert_eq!(
            mount_source(Some("mount=sha256:00&from=w%2Fb")),
            Some("w/b".into())
        );
        assert_eq!(mount_source(Some("from=w/b")), None);
        assert_eq!(mount_source(Some("mount=sha256:00")), None);
        assert_eq!(mount_source(None), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// `need` answers any request without panicking; a volume path
        /// names its volume whether its slashes are escaped or not (as
        /// the handler's extractor decodes them), and a claim always
        /// needs push.
        #[test]
        fn need_takes_any_path_and_decodes_volume_paths(
            path in "/(api/v1|v2)/\\PC{0,40}",
            name in "[a-z0-9]{1,5}(/[a-z0-9]{1,5}){1,3}",
            sub in proptest::sample::select(vec!["", "/-/versions", "/-/tags/prod", "/-/claim", "/-/claim/tok"]),
            method in proptest::sample::select(vec![Method::GET, Method::HEAD, Method::PUT, Method::POST, Method::PATCH, Method::DELETE]),
        ) {
            let _ = need(&method, &path);
            let plain = format!("/api/v1/volumes/{name}{sub}");
            let escaped = plain.replace('/', "%2F").replacen("%2Fapi%2Fv1%2Fvolumes%2F", "/api/v1/volumes/", 1);
            let want = need(&method, &plain);
            let action = match &want {
                Need::Repository { name: n, action } => {
                    proptest::prop_assert_eq!(n, &name);
                    *action
                }
                other => return Err(proptest::test_runner::TestCaseError::fail(format!("{plain}: {other:?}"))),
            };
            proptest::prop_assert_eq!(need(&method, &escaped), want);
            if sub.starts_with("/-/claim") {
                proptest::prop_assert_eq!(action, Action::Push);
            }
        }
    }

    #[test]
    fn web_routes_need_what_the_api_needs() {
        let repo = |name: &str, action| Need::Repository {
            name: name.into(),
            action,
        };
        // What the web view's paths need; `None` for a path outside it.
        let n = |m: Method, p: &str| matches!(route(p), Some(Route::Web(_))).then(|| need(&m, p));
        assert_eq!(n(Method::GET, "/ui/"), Some(Need::Listing));
        assert_eq!(n(Method::GET, "/ui/login"), Some(Need::Nothing));
        assert_eq!(n(Method::GET, "/ui/static/app.css"), Some(Need::Nothing));
        assert_eq!(
            n(Method::GET, "/ui/volumes/w/a"),
            Some(repo("w/a", Action::Pull))
        );
        assert_eq!(
            n(Method::GET, "/ui/volumes/w/a/-/versions/b3:00"),
            Some(repo("w/a", Action::Pull))
        );
        assert_eq!(
            n(Method::POST, "/ui/volumes/w/a/-/versions/b3:00/delete"),
            Some(repo("w/a", Action::Delete))
        );
        assert_eq!(
            n(Method::GET, "/ui/volumes/w/a/-/versions/b3:00/delete"),
            Some(repo("w/a", Action::Delete))
        );
        assert_eq!(
            n(Method::POST, "/ui/volumes/w/a/-/versions/b3:00/restore"),
            Some(repo("w/a", Action::Delete))
        );
        assert_eq!(
            n(Method::POST, "/ui/volumes/w/a/-/tags"),
            Some(repo("w/a", Action::Push))
        );
        assert_eq!(n(Method::POST, "/ui/volumes/w/a"), Some(Need::Nothing));
        assert_eq!(n(Method::GET, "/ui/syncs"), Some(Need::Listing));
        assert_eq!(n(Method::POST, "/ui/syncs"), Some(Need::NewSync));
        assert_eq!(
            n(Method::GET, "/ui/syncs/sync-1"),
            Some(Need::SyncJob(Action::Pull))
        );
        assert_eq!(
            n(Method::POST, "/ui/syncs/sync-1/cancel"),
            Some(Need::SyncJob(Action::Push))
        );
        // Percent-encoded as the handler decodes it.
        assert_eq!(
            n(Method::GET, "/ui/volumes/w%2Fa"),
            Some(repo("w/a", Action::Pull))
        );
        assert_eq!(n(Method::GET, "/uix"), None);
        assert_eq!(n(Method::GET, "/v2/"), None);
    }
}
