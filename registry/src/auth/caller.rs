//! The caller a request runs for: who it is, what its token grants, and
//! the questions handlers ask of it (may, sees, check), answered by the
//! policy and the token together.

use std::sync::Arc;

use sealvol_spec::api::Action;

use crate::auth::policy::{Policy, Subject};
use crate::auth::tokens::Grant;
use crate::auth::Auth;
use crate::error::{Code, RegistryError};

/// The authenticated caller, in each request's extensions.
#[derive(Clone, Debug)]
pub struct Caller {
    pub subject: Subject,
    /// What the caller's bearer token grants, when it sent one: the
    /// policy and the token must both allow an action.
    pub(crate) grant: Option<Grant>,
    pub(crate) auth: Arc<Auth>,
}

impl Caller {
    pub(crate) fn new(subject: Subject, grant: Option<Grant>, auth: Arc<Auth>) -> Caller {
        Caller {
            subject,
            grant,
            auth,
        }
    }

    /// The caller of a handler reached without the auth layer (never in
    /// `sealvol serve`): anonymous, with no rights, so a missing layer
    /// fails closed.
    pub fn anonymous() -> Caller {
        Caller {
            subject: Subject::Anonymous,
            grant: None,
            auth: Arc::new(Auth::new(Policy::default(), None, None, None, Vec::new())),
        }
    }

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

pub(crate) fn denied_line(subject: &Subject, repository: &str, action: &str) {
    tracing::warn!(
        subject = subject.name(),
        repository,
        action,
        "access denied"
    );
}
