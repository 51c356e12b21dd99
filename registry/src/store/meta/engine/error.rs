//! What an engine fails with: [`TableError`], the engine's message.

/// An engine failure, with its message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TableError(pub String);

macro_rules! from_engine {
    ($($t:ty),*) => {$(
        impl From<$t> for TableError {
            fn from(e: $t) -> Self {
                TableError(e.to_string())
            }
        }
    )*};
}
from_engine!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

pub type Result<T> = std::result::Result<T, TableError>;
