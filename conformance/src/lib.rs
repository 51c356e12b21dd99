//! OCI distribution conformance runner.
//!
//! Checks any registry URL against the four workflow categories of the
//! [OCI distribution-spec v1.1](https://github.com/opencontainers/distribution-spec/blob/main/spec.md):
//! **pull** (manifests and blobs by tag and digest, `HEAD`, byte ranges,
//! 404s), **push** (single-POST, POST-then-PUT and chunked blob uploads,
//! upload status and cancel, cross-repository mounts, manifest and index
//! pushes, and the errors for bad digests, missing blobs, invalid or
//! oversized manifests and invalid names), **content discovery** (tags list
//! and its pagination, the referrers API with `OCI-Subject` and
//! `artifactType` filtering, the catalog) and **content management**
//! (deleting tags, manifests and blobs). Every run uses a fresh run id in its
//! tags and blob contents, so runs against the same registry and
//! repository do not collide. Each check reports PASS or FAIL with the
//! request, the expected and the received status, header or body; a check
//! whose setup (usually a push) failed reports a `precondition:` failure.
//!
//! What it is not: not the official OCI conformance suite (it does not
//! produce results for certification, and its checks follow this project's
//! reading of the spec, stricter in places: single-POST uploads, tag
//! deletion, `Link` pagination and error codes are required); not an
//! authentication test (it sends no credentials, so a registry that
//! requires auth only passes the base check); not a load or concurrency
//! test; and it knows nothing of sealvol's own volume format. It leaves the
//! content it pushes behind (except what the management checks delete).
//!
//! The binary `sealvol-conformance` wraps [`run`].

pub mod base;
pub mod check;
pub mod content;
pub mod ctx;
pub mod discovery;
mod error;
pub mod failure;
pub mod http;
pub mod management;
pub mod pull;
pub mod push;
pub mod report;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use reqwest::Method;

pub use check::{Check, Workflow};
pub use error::RunError;
pub use failure::CheckFailure;
pub use report::{CheckResult, Report, WorkflowTally};

/// The default repository the checks push to.
pub const DEFAULT_NAMESPACE: &str = "conformance/test";

/// What to check.
#[derive(Debug, Clone)]
pub struct Config {
    /// Registry base URL, e.g. `http://127.0.0.1:5000`.
    pub url: String,
    /// Repository to use; a sibling `<namespace>/other` is used for mounts.
    pub namespace: String,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Basic credentials (user, password) for a registry with auth on.
    pub credentials: Option<(String, String)>,
}

impl Config {
    pub fn new(url: impl Into<String>) -> Config {
        Config {
            url: url.into(),
            namespace: DEFAULT_NAMESPACE.to_string(),
            timeout: Duration::from_secs(60),
            credentials: None,
        }
    }
}

/// Every check, in run order (base, push, pull, discovery, management).
pub fn all_checks() -> Vec<Check> {
    let mut all = base::checks();
    all.extend(push::checks());
    all.extend(pull::checks());
    all.extend(discovery::checks());
    all.extend(management::checks());
    all
}

/// Whether `name` is a repository name the spec allows: path components
/// of `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`, separated by
/// `/`. Kept under 250 characters so `<name>/other` stays under 256.
pub fn is_valid_repository_name(name: &str) -> bool {
    name.len() < 250
        && name
            .split('/')
            .all(sealvol_spec::reference::is_name_component)
}

/// A fresh id for one run (12 hex digits).
pub fn new_run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// Runs every check against `config.url`, calling `on_result` as each
/// finishes. Fails before any check when the configuration is invalid or
/// `GET /v2/` cannot be sent at all.
pub fn run(config: &Config, mut on_result: impl FnMut(&CheckResult)) -> Result<Report, RunError> {
    if !is_valid_repository_name(&config.namespace) {
        return Err(RunError::InvalidNamespace(config.namespace.clone()));
    }
    let mut reg = http::Registry::new(&config.url, config.timeout)?;
    if let Some((u, p)) = &config.credentials {
        reg = reg.with_credentials(u.clone(), p.clone());
    }
    let probe = reg.url("/v2/", &[]);
    if let Err(CheckFailure::Transport { error, .. }) = reg.send(Method::GET, probe, true, |b| b) {
        return Err(RunError::Unreachable {
            url: config.url.clone(),
            reason: error,
        });
    }
    let registry = reg.base().to_string();
    let run_id = new_run_id();
    let mut ctx = ctx::Ctx::new(reg, &config.namespace, &run_id);
    let mut results = Vec::new();
    for check in all_checks() {
        let outcome =
            catch_unwind(AssertUnwindSafe(|| (check.run)(&mut ctx))).unwrap_or_else(|_| {
                Err(CheckFailure::Precondition(
                    "internal error: the check panicked".into(),
                ))
            });
        let result = CheckResult {
            workflow: check.workflow,
            name: check.name.to_string(),
            passed: outcome.is_ok(),
            reason: outcome.err().map(|e| e.to_string()),
        };
        on_result(&result);
        results.push(result);
    }
    Ok(Report {
        registry,
        repository: config.namespace.clone(),
        run_id,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names() {
        for ok in ["conformance/test", "a", "a.b/c_d/e__f/g--h", "0/1"] {
            assert!(is_valid_repository_name(ok), "{ok}");
        }
        for bad in [
            "", "A", "a/", "/a", "a//b", "-a", "a-", "a..b", "a___b", "a b", "a:b",
        ] {
            assert!(!is_valid_repository_name(bad), "{bad}");
        }
        assert!(!is_valid_repository_name(&"a".repeat(250)));
    }

    #[test]
    fn checks_have_unique_names_and_cover_every_workflow() {
        let all = all_checks();
        let mut names: Vec<_> = all.iter().map(|c| (c.workflow, c.name)).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        for w in Workflow::ALL {
            assert!(all.iter().any(|c| c.workflow == w), "{w}");
        }
        let order: Vec<_> = all.iter().map(|c| c.workflow).collect();
        let mut sorted = order.clone();
        sorted.sort_by_key(|w| Workflow::ALL.iter().position(|x| x == w));
        assert_eq!(order, sorted);
    }

    #[test]
    fn run_ids_differ() {
        let a = new_run_id();
        assert_eq!(a.len(), 12);
        assert_ne!(a, new_run_id());
    }

    #[test]
    fn unreachable_registry_is_an_error_not_a_report() {
        // Port 9 (discard) on loopback: nothing listens there in tests.
        let mut cfg = Config::new("http://127.0.0.1:9");
        cfg.timeout = Duration::from_secs(5);
        match run(&cfg, |_| {}) {
            Err(RunError::Unreachable { .. }) => {}
            other => panic!("expected Unreachable, got {other:?}"),
        }
        cfg.namespace = "Bad".into();
        assert!(matches!(
            run(&cfg, |_| {}),
            Err(RunError::InvalidNamespace(_))
        ));
    }
}
