//! OCI distribution errors: every failure a handler returns becomes the
//! spec's JSON body (`{"errors":[{"code","message","detail"}]}`) with the
//! status the spec gives its code, in this one place.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The codes of the error body, OCI's and the volume API's, spelled as
/// SPEC.md and the client read them.
pub use sealvol_spec::api::ErrorCode as Code;

/// The status a code answers with unless a handler overrides it: the
/// distribution spec's, and SPEC.md §7.2's and §8.3's tables.
fn default_status(code: Code) -> StatusCode {
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

impl From<crate::service::volumes::LifecycleError> for RegistryError {
    fn from(e: crate::service::volumes::LifecycleError) -> Self {
        use crate::service::volumes::LifecycleError as L;
        let code = match &e {
            L::VolumeUnknown(_) => Code::VolumeUnknown,
            L::VersionUnknown(_) => Code::VersionUnknown,
            L::TagUnknown { .. } => Code::TagUnknown,
            L::NotDeleted(_) => Code::NotDeleted,
            L::RetentionExpired { .. } => Code::RetentionExpired,
            L::TagReserved(_) => Code::TagReserved,
            L::Invalid(_) => Code::Invalid,
            L::Meta(m) => return RegistryError::internal(m),
        };
        RegistryError::new(code, e.to_string())
    }
}

impl From<crate::store::meta::keys::KeyError> for RegistryError {
    fn from(e: crate::store::meta::keys::KeyError) -> Self {
        use crate::store::meta::keys::KeyError as K;
        match e {
            K::Invalid(why) => RegistryError::new(Code::Invalid, why),
            K::Unknown(_) => RegistryError::new(Code::KeyUnknown, e.to_string()),
            K::Meta(m) => RegistryError::internal(m),
        }
    }
}

impl From<crate::store::meta::MetaError> for RegistryError {
    fn from(e: crate::store::meta::MetaError) -> Self {
        RegistryError::internal(e)
    }
}

pub type Result<T> = std::result::Result<T, RegistryError>;

/// 500 with distribution's `UNKNOWN` error body: for failures on our side,
/// whose details go to the log rather than to the client. (`UNKNOWN` is
/// not one of [`Code`]'s, which are the codes a handler may choose.)
pub fn unknown(message: &str) -> Response {
    let body = serde_json::json!({"errors": [{"code": "UNKNOWN", "message": message}]});
    let mut resp = (StatusCode::INTERNAL_SERVER_ERROR, body.to_string()).into_response();
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// What the catch-panic layer answers for a handler that panicked: a bug,
/// logged, never a dropped connection or a dead worker.
pub fn panicked(why: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let why = why
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| why.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!("a request handler panicked: {why}");
    unknown("internal error; the registry's log says more")
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            RegistryError::Oci {
                code,
                message,
                status,
            } => (status.unwrap_or(default_status(code)), code, message),
            RegistryError::Internal(m) => {
                tracing::error!("{m}");
                return unknown("internal error; the registry's log says more");
            }
            RegistryError::Damaged(m) => {
                tracing::error!("{m}");
                return unknown(&m);
            }
            RegistryError::Upstream(m) => {
                tracing::warn!("{m}");
                let mut resp = unknown(&m);
                *resp.status_mut() = StatusCode::BAD_GATEWAY;
                return resp;
            }
        };
        let body = sealvol_spec::api::ErrorBody::new(code, message);
        let body = serde_json::to_string(&body).expect("an error body serializes");
        let mut resp = (status, body).into_response();
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        resp
    }
}
