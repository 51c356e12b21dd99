//! The sealvol volume format, as `SPEC.md` in this crate defines it.
//!
//! This crate is the format and nothing else: parsing refs and digests,
//! the tree index and its encoding, the version digest, the chunking
//! parameters and cut points, the layout of a version as OCI content, the
//! recorded prefetch list of a version ([`prefetch`]), the signed
//! statements over a version ([`signature`]), and
//! the JSON bodies of the registry's `/api/v1` ([`api`]). It does no I/O:
//! reading directories and talking to registries belong to
//! `sealvol-client`, serving them to `sealvol-registry`.
//!
//! ```
//! use sealvol_spec::{ChunkingParams, Entry, EntryData, TreeIndex};
//! let tree = TreeIndex::new(
//!     ChunkingParams::default(),
//!     vec![Entry { path: "models".into(), mode: 0o755, data: EntryData::Dir }],
//! )
//! .unwrap();
//! let digest = tree.version_digest();
//! assert!(digest.to_string().starts_with("b3:"));
//! assert_eq!(TreeIndex::decode(&tree.encode().unwrap()).unwrap(), tree);
//! ```

pub mod api;
pub mod chain;
pub mod chunking;
pub mod diff;
pub mod digest;
pub mod filter;
pub mod oci;
pub mod path;
pub mod prefetch;
pub mod reference;
pub mod signature;
pub mod tree;
pub mod version;

pub use chunking::{ChunkingParams, Cutter};
pub use digest::{B3Digest, DigestSelector, Sha256Digest};
pub use reference::{Selector, Tag, VolumeRef};
pub use tree::{ChunkRef, Entry, EntryData, TreeFormat, TreeIndex, TreeStats};
