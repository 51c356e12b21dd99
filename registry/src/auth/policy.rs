//! The authorization policy (SPEC.md §7.5), shaped like zot's: data from
//! `registry.toml` `[auth]`, and one pure function that fails closed.
//!
//! Admins may do everything. For a repository, the `[[auth.access]]`
//! entries whose `repositories` globs match it are considered, and of
//! those only the ones with the longest matching pattern decide (several
//! entries may share a pattern: one for writers, one for readers). Those
//! entries grant their `actions` to their `users`, their `default` to any
//! authenticated caller and their `anonymous` to everyone. Where no entry
//! matches, the global `default` and `anonymous` lists apply. Nothing
//! else is allowed.

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::Deserialize;

use std::collections::HashMap;
use std::sync::Arc;

use crate::store::meta::keys::KeyGrant;
use sealvol_spec::api::Action;

/// One `[[auth.access]]` entry as written in `registry.toml`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessEntry {
    /// Globs over repository names: `*` stays within one path component,
    /// `**` crosses them (`weights/**`).
    pub repositories: Vec<String>,
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups of `[auth.groups]` whose members get `actions` too.
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub actions: Vec<Action>,
    /// What any authenticated caller may do here (default: nothing).
    #[serde(default)]
    pub default: Vec<Action>,
    /// What a caller without credentials may do here (default: nothing).
    #[serde(default)]
    pub anonymous: Vec<Action>,
}

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Anonymous,
    User(String),
    /// An API key: its own scope, never admin, whatever the policy says.
    Key(Arc<KeyGrant>),
}

impl Subject {
    pub fn name(&self) -> &str {
        match self {
            Subject::Anonymous => "anonymous",
            Subject::User(u) => u,
            Subject::Key(k) => &k.id,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("[auth.access] repository pattern {pattern:?}: {message}")]
    Pattern { pattern: String, message: String },
    #[error("[auth.access] names group {0:?}, which [auth.groups] does not define")]
    UnknownGroup(String),
}

/// The compiled policy.
#[derive(Debug, Default)]
pub struct Policy {
    admins: Vec<String>,
    anonymous: Vec<Action>,
    default: Vec<Action>,
    entries: Vec<(Vec<(String, GlobMatcher)>, AccessEntry)>,
    /// Everyone is an admin: the registry without `[auth]` on loopback.
    everyone_admin: bool,
    /// `[auth.groups]`: group name -> its users.
    groups: HashMap<String, Vec<String>>,
}

impl Policy {
    pub fn new(
        admins: Vec<String>,
        anonymous: Vec<Action>,
        default: Vec<Action>,
        access: Vec<AccessEntry>,
    ) -> Result<Policy, PolicyError> {
        let mut entries = Vec::with_capacity(access.len());
        for entry in access {
            let mut globs = Vec::with_capacity(entry.repositories.len());
            for pattern in &entry.repositories {
                let glob: Glob = GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| PolicyError::Pattern {
                        pattern: pattern.clone(),
                        message: e.kind().to_string(),
                    })?;
                globs.push((pattern.clone(), glob.compile_matcher()));
            }
            entries.push((globs, entry));
        }
        Ok(Policy {
            admins,
            anonymous,
            default,
            entries,
            everyone_admin: false,
            groups: HashMap::new(),
        })
    }

    /// The policy with `[auth.groups]`; an entry naming a group it does
    /// not define is an error, not a silent denial.
    pub fn with_groups(
        mut self,
        groups: HashMap<String, Vec<String>>,
    ) -> Result<Policy, PolicyError> {
        for (_, e) in &self.entries {
            if let Some(g) = e.groups.iter().find(|g| !groups.contains_key(*g)) {
                return Err(PolicyError::UnknownGroup(g.clone()));
            }
        }
        self.groups = groups;
        Ok(self)
    }

    /// Whether `user` is one of `entry`'s users, directly or by a group.
    fn member(&self, entry: &AccessEntry, user: &str) -> bool {
        entry.users.iter().any(|x| x == user)
            || entry.groups.iter().any(|g| {
                self.groups
                    .get(g)
                    .is_some_and(|m| m.iter().any(|x| x == user))
            })
    }

    /// Everything to everyone: a registry without `[auth]` listening on
    /// loopback, where only this machine's users reach it.
    pub fn loopback() -> Policy {
        Policy {
            everyone_admin: true,
            ..Policy::anonymous_writes()
        }
    }

    /// `pull`, `push` and `delete` on every repository to everyone, never
    /// admin: `--allow-anonymous-writes` off loopback.
    pub fn anonymous_writes() -> Policy {
        let all = vec![Action::Pull, Action::Push, Action::Delete];
        Policy {
            anonymous: all.clone(),
            default: all,
            ..Policy::default()
        }
    }

    pub fn is_admin(&self, subject: &Subject) -> bool {
        match subject {
            Subject::Key(_) => false,
            Subject::User(u) => self.everyone_admin || self.admins.iter().any(|a| a == u),
            Subject::Anonymous => self.everyone_admin,
        }
    }

    /// Whether `subject` may do `action` to `repository`.
    pub fn allows(&self, subject: &Subject, repository: &str, action: Action) -> bool {
        if let Subject::Key(k) = subject {
            return k.allows(repository, action);
        }
        if self.is_admin(subject) {
            return true;
        }
        let longest = self
            .entries
            .iter()
            .flat_map(|(globs, _)| globs)
            .filter(|(_, g)| g.is_match(repository))
            .map(|(p, _)| p.len())
            .max();
        let Some(longest) = longest else {
            let global = match subject {
                Subject::Anonymous => &self.anonymous,
                Subject::User(_) | Subject::Key(_) => &self.default,
            };
            return global.contains(&action);
        };
        self.entries
            .iter()
            .filter(|(globs, _)| {
                globs
                    .iter()
                    .any(|(p, g)| p.len() == longest && g.is_match(repository))
            })
            .any(|(_, e)| {
                e.anonymous.contains(&action)
                    || match subject {
                        Subject::Anonymous | Subject::Key(_) => false,
                        Subject::User(u) => {
                            e.default.contains(&action)
                                || (self.member(e, u) && e.actions.contains(&action))
                        }
                    }
            })
    }

    /// Whether `subject` may do anything at all here: reach the API roots
    /// and see (filtered) listings.
    pub fn knows(&self, subject: &Subject) -> bool {
        match subject {
            Subject::User(_) | Subject::Key(_) => true,
            Subject::Anonymous => {
                !self.anonymous.is_empty()
                    || self.entries.iter().any(|(_, e)| !e.anonymous.is_empty())
            }
        }
    }

    /// The actions `subject` may do to `repository`, in a fixed order.
    pub fn actions(&self, subject: &Subject, repository: &str) -> Vec<Action> {
        [Action::Pull, Action::Push, Action::Delete]
            .into_iter()
            .filter(|a| self.allows(subject, repository, *a))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    fn user(u: &str) -> Subject {
        Subject::User(u.into())
    }

    fn policy() -> Policy {
        Policy::new(
            vec!["root".into()],
            vec![],
            vec![Pull],
            vec![
                AccessEntry {
                    repositories: vec!["weights/**".into()],
                    users: vec!["writer".into()],
                    actions: vec![Pull, Push],
                    ..AccessEntry::default()
                },
                AccessEntry {
                    repositories: vec!["weights/**".into()],
                    users: vec!["reader".into()],
                    actions: vec![Pull],
                    ..AccessEntry::default()
                },
                AccessEntry {
                    repositories: vec!["weights/public/*".into()],
                    anonymous: vec![Pull],
                    default: vec![Pull],
                    ..AccessEntry::default()
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn longest_pattern_decides_and_denies_by_default() {
        let p = policy();
        assert!(p.allows(&user("root"), "any/thing", Delete));
        assert!(p.allows(&user("writer"), "weights/a/b", Push));
        assert!(!p.allows(&user("writer"), "weights/a/b", Delete));
        assert!(p.allows(&user("reader"), "weights/a", Pull));
        assert!(!p.allows(&user("reader"), "weights/a", Push));
        // An entry matches: the global default no longer applies.
        assert!(!p.allows(&user("other"), "weights/a", Pull));
        // Elsewhere, the global default does.
        assert!(p.allows(&user("other"), "datasets/a", Pull));
        assert!(!p.allows(&Subject::Anonymous, "datasets/a", Pull));
        // The longer pattern wins over weights/**, even for the writer.
        assert!(p.allows(&Subject::Anonymous, "weights/public/x", Pull));
        assert!(!p.allows(&user("writer"), "weights/public/x", Push));
        // `*` does not cross a slash.
        assert!(!p.allows(&Subject::Anonymous, "weights/public/x/y", Pull));
        assert!(p.knows(&Subject::Anonymous));
    }

    #[test]
    fn groups_grant_their_members_and_must_exist() {
        let entry = AccessEntry {
            repositories: vec!["datasets/**".into()],
            groups: vec!["ml".into()],
            actions: vec![Pull, Push],
            ..AccessEntry::default()
        };
        let p = Policy::new(vec![], vec![], vec![], vec![entry.clone()])
            .unwrap()
            .with_groups(HashMap::from([("ml".into(), vec!["carol".into()])]))
            .unwrap();
        assert!(p.allows(&user("carol"), "datasets/x", Push));
        assert!(!p.allows(&user("dave"), "datasets/x", Pull));
        let unknown = Policy::new(vec![], vec![], vec![], vec![entry])
            .unwrap()
            .with_groups(HashMap::new());
        assert!(matches!(unknown, Err(PolicyError::UnknownGroup(g)) if g == "ml"));
    }

    #[test]
    fn empty_policy_denies_everything() {
        let p = Policy::default();
        assert!(!p.allows(&user("u"), "a/b", Pull));
        assert!(!p.allows(&Subject::Anonymous, "a/b", Pull));
        assert!(!p.knows(&Subject::Anonymous));
        assert!(!p.is_admin(&user("u")));
    }

    #[test]
    fn a_bad_pattern_is_refused() {
        let bad = AccessEntry {
            repositories: vec!["weights/[".into()],
            ..AccessEntry::default()
        };
        assert!(Policy::new(vec![], vec![], vec![], vec![bad]).is_err());
    }
}
