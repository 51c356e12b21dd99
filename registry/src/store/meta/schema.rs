//! Every table of the metadata store, declared once: its name as it is
//! on disk (byte for byte what earlier releases wrote, in redb files and
//! in PostgreSQL's `sealvol_tables.tbl`), the kind of its values, and
//! what a row holds; and how keys are made. Keys are text: a key of
//! several parts joins them with NUL (`key`), which no repository
//! name, tag or digest contains, so a repository's rows form one
//! contiguous key range (`prefix`).
//!
//! `create_all` opens every table declared here when a store opens, so
//! a reader never meets a missing one. Only `store::meta` opens tables:
//! the floors above call `MetaStore`'s methods, each one transaction.

use crate::store::meta::engine::{Bytes, Str, TableDefinition, WriteTransaction, U64};
use crate::store::meta::error::Result;

/// Declares each table as a constant, and [`create_all`] and [`NAMES`]
/// over all of them, so that a table declared here is always created.
macro_rules! tables {
    ($($(#[$doc:meta])* $name:ident: $values:ty = $table:literal;)*) => {
        $(
            $(#[$doc])*
            pub(crate) const $name: TableDefinition<$values> = TableDefinition::new($table);
        )*

        /// Opens every table in `tx`, creating those that are not there
        /// yet (on redb; PostgreSQL keeps every table in one relation).
        pub(crate) fn create_all(tx: &WriteTransaction) -> Result<()> {
            $(tx.open_table($name)?;)*
            Ok(())
        }

        /// Every table's name, in the order [`create_all`] opens them.
        #[cfg(test)]
        pub(crate) const NAMES: &[&str] = &[$($table),*];
    };
}

tables! {
    // The OCI view (`oci`, `uploads`, `gc`).

    /// `repo` -> when the repository was first recorded (Unix seconds).
    REPOS: U64 = "repos";
    /// `repo NUL digest` -> size: the blobs a repository may see.
    BLOB_LINKS: U64 = "blob_links";
    /// `repo NUL digest` -> [`super::oci::ManifestRecord`] JSON.
    MANIFESTS: Bytes = "manifests";
    /// `repo NUL tag` -> the digest the tag points at.
    TAGS: Str = "tags";
    /// `repo NUL subject NUL digest` -> the referrer's descriptor JSON, as
    /// the referrers API lists it.
    REFERRERS: Bytes = "referrers";
    /// Upload id -> the repository the session uploads to.
    UPLOADS: Str = "uploads";
    /// Upload id -> when the session was started or last written to (Unix
    /// seconds); a session idle longer than the upload TTL is abandoned.
    /// Sessions from before this table have no row; the first expiry pass
    /// gives them one, so they get a full TTL from the upgrade.
    UPLOAD_TIMES: U64 = "upload_times";
    /// `repo NUL digest` -> when the link was made or renewed (Unix seconds);
    /// garbage collection's grace period counts from it. Links made before
    /// this table existed have no row and count as old.
    LINK_TIMES: U64 = "link_times";

    // Volumes (`volumes`).

    /// `repo` -> [`super::volumes::VolumeRecord`] JSON.
    VOLUMES: Bytes = "volumes";
    /// `repo NUL b3:<hex>` -> [`super::volumes::VersionRecord`] JSON.
    VERSIONS: Bytes = "versions";
    /// `repo NUL sha256:<hex>` -> `b3:<hex>`: which version an index belongs to.
    VERSION_OF_INDEX: Str = "version_of_index";
    /// `repo NUL tag` -> Unix seconds after which the tag goes.
    TAG_EXPIRY: U64 = "tag_expiry";
    /// `repo NUL sha256:<hex>` -> the manifest record of a tombstoned index.
    HIDDEN: Bytes = "hidden_manifests";
    /// `repo \0 sha256:<hex>` → the chunk's size: the distinct chunks of the
    /// volume's kept versions, while its record's `stats` is known
    /// (`volumes::stats`).
    VOLUME_CHUNKS: U64 = "volume_chunks";

    // Sync jobs and their secrets (`syncs`, `secrets`).

    /// `id` -> [`super::syncs::SyncJob`] JSON.
    SYNC_JOBS: Bytes = "sync_jobs";
    /// `id NUL path` -> [`super::syncs::FileDone`] JSON, marked with
    /// [`super::syncs::FILE_RECORD`].
    SYNC_FILES: Bytes = "sync_files";
    /// `chunking NUL scope NUL identity` -> [`super::syncs::FileDone`] JSON:
    /// a file some job sealed, found again by what its source said it was
    /// (SPEC.md §8.5; [`super::syncs::ReuseKey`]).
    SYNC_REUSE: Bytes = "sync_reuse";
    /// `name` -> [`super::secrets::StoredSecret`] JSON: the value sealed,
    /// and its binding.
    SECRETS: Bytes = "secrets.v2";
    /// `id` -> [`super::schedules::Schedule`] JSON.
    SYNC_SCHEDULES: Bytes = "sync_schedules";

    // API keys (`keys`).

    /// key id -> `keys::KeyRecord` as JSON.
    API_KEYS: Bytes = "api_keys";

    // Push claims and the GC lease (`claims`).

    /// Volume name -> its [`super::claims::Claim`] (JSON).
    CLAIMS: Bytes = "claims";

    // Garbage collection's sweeps (`sweeps`).

    /// `"sweeps"` -> the sweep sequence: odd while a sweep deletes bytes.
    GC_SWEEPS: U64 = "gc_sweeps";
    /// `"sweeps"` -> `"N TOKEN"`: the token of the GC lease under which sweep
    /// number `N` (odd) began.
    GC_SWEEPERS: Str = "gc_sweepers";
}

/// The key of the row whose key parts are `parts`.
pub(crate) fn key(parts: &[&str]) -> String {
    parts.join("\0")
}

/// The key range of every row whose key starts with `parts` + NUL.
pub(crate) fn prefix(parts: &[&str]) -> (String, String) {
    let p = key(parts);
    (format!("{p}\0"), format!("{p}\x01"))
}

/// `name` -> value in plaintext, as releases before binding stored them;
/// emptied into [`SECRETS`] at start ([`super::db::MetaStore::seal_plaintext_secrets`])
/// and deleted. Never created: only a redb file of such a release has it.
pub(crate) const PLAINTEXT_SECRETS: redb::TableDefinition<&str, &[u8]> =
    redb::TableDefinition::new("secrets");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::meta::db::MetaStore;
    use crate::store::meta::engine::Database;

    #[test]
    fn names_are_the_ones_on_disk() {
        // What earlier releases wrote: a renamed table would read as empty.
        assert_eq!(
            NAMES,
            [
                "repos",
                "blob_links",
                "manifests",
                "tags",
                "referrers",
                "uploads",
                "upload_times",
                "link_times",
                "volumes",
                "versions",
                "version_of_index",
                "tag_expiry",
                "hidden_manifests",
                "volume_chunks",
                "sync_jobs",
                "sync_files",
                "sync_reuse",
                "secrets.v2",
                "sync_schedules",
                "api_keys",
                "claims",
                "gc_sweeps",
                "gc_sweepers",
            ]
        );
        assert_eq!(redb::TableHandle::name(&PLAINTEXT_SECRETS), "secrets");
    }

    #[test]
    fn a_new_store_has_every_table() {
        use redb::ReadableDatabase as _;
        let (_dir, m) = MetaStore::temporary();
        let Database::Redb(db) = &m.db else {
            panic!("a temporary store is redb");
        };
        let tx = db.begin_read().unwrap();
        let mut found: Vec<String> = tx
            .list_tables()
            .unwrap()
            .map(|t| redb::TableHandle::name(&t).to_string())
            .collect();
        found.sort();
        let mut want: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
        want.sort();
        assert_eq!(found, want);
    }
}
