//! What a check is and which workflow it belongs to. How it fails is
//! [`crate::failure`]'s.

use serde::Serialize;

use crate::ctx::Ctx;
use crate::failure::CheckFailure;

/// The OCI distribution-spec workflow categories, plus the API base check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workflow {
    /// `GET /v2/`.
    Base,
    /// Pull: manifests and blobs by tag and digest, ranges, 404s.
    Pull,
    /// Push: blob uploads (monolithic, chunked, mount) and manifest pushes.
    Push,
    /// Content discovery: tags list, referrers, catalog.
    Discovery,
    /// Content management: deleting tags, manifests and blobs.
    Management,
}

impl Workflow {
    /// Every workflow, in the order checks run and the table lists them.
    pub const ALL: [Workflow; 5] = [
        Workflow::Base,
        Workflow::Push,
        Workflow::Pull,
        Workflow::Discovery,
        Workflow::Management,
    ];

    /// The lowercase name used in output lines, the table and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Workflow::Base => "base",
            Workflow::Pull => "pull",
            Workflow::Push => "push",
            Workflow::Discovery => "discovery",
            Workflow::Management => "management",
        }
    }
}

impl std::fmt::Display for Workflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one check.
pub type CheckResultOf = Result<(), CheckFailure>;

/// One conformance check: a workflow, a short name and the function that
/// runs it against the registry held in the context.
#[derive(Clone, Copy)]
pub struct Check {
    pub workflow: Workflow,
    pub name: &'static str,
    pub run: fn(&mut Ctx) -> CheckResultOf,
}

impl Check {
    pub(crate) const fn new(
        workflow: Workflow,
        name: &'static str,
        run: fn(&mut Ctx) -> CheckResultOf,
    ) -> Check {
        Check {
            workflow,
            name,
            run,
        }
    }
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("workflow", &self.workflow)
            .field("name", &self.name)
            .finish()
    }
}
