//! Why a volume operation was refused, and the API code each maps to.

use crate::store::meta::error::MetaError;

/// Why a volume operation was refused; each maps to an API code (§7.2).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {0} is not known")]
    VolumeUnknown(String),
    #[error("{0}")]
    VersionUnknown(String),
    #[error("tag {tag} is not known in {repo}")]
    TagUnknown { repo: String, tag: String },
    #[error("{0} is alive; only a deleted version can be restored")]
    NotDeleted(String),
    #[error("{what} was deleted more than {days} days ago and cannot be restored")]
    RetentionExpired { what: String, days: u64 },
    #[error("tag {0} is the registry's own; set and delete user tags only")]
    TagReserved(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Meta(#[from] MetaError),
}

crate::store::meta::error::from_redb!(VolumeError, VolumeError::Meta);

impl From<VolumeError> for crate::error::RegistryError {
    fn from(e: VolumeError) -> Self {
        use VolumeError as L;
        let code = match &e {
            L::VolumeUnknown(_) => crate::error::Code::VolumeUnknown,
            L::VersionUnknown(_) => crate::error::Code::VersionUnknown,
            L::TagUnknown { .. } => crate::error::Code::TagUnknown,
            L::NotDeleted(_) => crate::error::Code::NotDeleted,
            L::RetentionExpired { .. } => crate::error::Code::RetentionExpired,
            L::TagReserved(_) => crate::error::Code::TagReserved,
            L::Invalid(_) => crate::error::Code::Invalid,
            L::Meta(m) => return crate::error::RegistryError::internal(m),
        };
        crate::error::RegistryError::new(code, e.to_string())
    }
}
