//! OCI distribution errors: every failure a handler returns becomes the
//! spec's JSON body (`{"errors":[{"code","message","detail"}]}`) with the
//! status the spec gives its code, in this one place.

use ::http::StatusCode;

/// The codes of the error body, OCI's and the volume API's, spelled as
/// SPEC.md and the client read them.
pub use sealvol_spec::api::ErrorCode as Code;

/// The status a code answers with unless a handler overrides it: the
/// distribution spec's, and SPEC.md §7.2's and §8.3's tables.
pub(crate) fn default_status(code: Code) -> StatusCode {
    match code {
        Code::BlobUnknown
        | Code::BlobUploadUnknown
        | Code::ManifestUnknown
        | Code::NameUnknown
        | Code::VolumeUnknown
        | Code::VersionUnknown
        | Code::TagUnknown
        | Code::ClaimUnknown
        | Code::PathUnknown
        | Code::SyncUnknown
        | Code::SecretUnknown
        | Code::ScheduleUnknown
        | Code::KeyUnknown => StatusCode::NOT_FOUND,
        Code::BlobUploadInvalid
        | Code::DigestInvalid
        | Code::ManifestBlobUnknown
        | Code::ManifestInvalid
        | Code::NameInvalid
        | Code::SizeInvalid
        | Code::Invalid
        | Code::TagReserved => StatusCode::BAD_REQUEST,
        Code::PushInProgress | Code::NotDeleted => StatusCode::CONFLICT,
        Code::RetentionExpired => StatusCode::GONE,
        Code::Unauthorized => StatusCode::UNAUTHORIZED,
        Code::Denied => StatusCode::FORBIDDEN,
        Code::Unsupported => StatusCode::METHOD_NOT_ALLOWED,
        Code::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
    }
}

/// What a handler returns on failure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RegistryError {
    /// A spec error code with a message for the client.
    #[error("{}: {message}", code.as_str())]
    Oci {
        code: Code,
        message: String,
        /// Overrides the code's usual status (416 for a bad range, 413 for
        /// an oversized manifest).
        status: Option<StatusCode>,
    },
    /// Something went wrong on our side; logged, answered 500.
    #[error("internal error: {0}")]
    Internal(String),
    /// Something the registry stores is not what it should be (a version
    /// sealed by an earlier release whose tree no longer reads): answered
    /// 500 with the message, which names what is damaged and what to do.
    #[error("{0}")]
    Damaged(String),
    /// The upstream of a pull-through cache failed or sent bad bytes:
    /// answered 502 with the message (it names the upstream, never a
    /// credential).
    #[error("{0}")]
    Upstream(String),
}

impl RegistryError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        RegistryError::Oci {
            code,
            message: message.into(),
            status: None,
        }
    }

    pub fn with_status(code: Code, status: StatusCode, message: impl Into<String>) -> Self {
        RegistryError::Oci {
            code,
            message: message.into(),
            status: Some(status),
        }
    }

    pub fn internal(e: impl std::fmt::Display) -> Self {
        RegistryError::Internal(e.to_string())
    }

    /// The status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            RegistryError::Oci { code, status, .. } => status.unwrap_or(default_status(*code)),
            RegistryError::Internal(_) | RegistryError::Damaged(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            RegistryError::Upstream(_) => StatusCode::BAD_GATEWAY,
        }
    }

    /// Whether it is the given spec code.
    pub fn is(&self, code: Code) -> bool {
        matches!(self, RegistryError::Oci { code: c, .. } if *c == code)
    }
}

impl From<std::io::Error> for RegistryError {
    fn from(e: std::io::Error) -> Self {
        RegistryError::internal(e)
    }
}

pub type Result<T> = std::result::Result<T, RegistryError>;
