//! What a metadata operation fails with: [`MetaError`], the message of
//! whatever the engine or a stored record's decoding raised.

#[derive(Debug, thiserror::Error)]
#[error("metadata store: {0}")]
pub struct MetaError(pub(crate) String);

/// Implements `From` for every error a metadata transaction can raise,
/// through `$via` (a function from the displayed error).
macro_rules! from_redb {
    ($target:ty, $via:expr) => {
        $crate::store::meta::error::from_redb!(
            $target,
            $via,
            redb::DatabaseError,
            redb::TransactionError,
            redb::TableError,
            redb::StorageError,
            redb::CommitError,
            $crate::store::meta::engine::error::TableError,
            serde_json::Error
        );
    };
    ($target:ty, $via:expr, $($t:ty),*) => {$(
        impl From<$t> for $target {
            fn from(e: $t) -> Self {
                $via($crate::store::meta::error::MetaError(e.to_string()))
            }
        }
    )*};
}
pub(crate) use from_redb;
from_redb!(MetaError, std::convert::identity);

pub type Result<T> = std::result::Result<T, MetaError>;

impl From<MetaError> for crate::error::RegistryError {
    fn from(e: MetaError) -> Self {
        crate::error::RegistryError::internal(e)
    }
}
