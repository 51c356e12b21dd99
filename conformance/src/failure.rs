//! How a check fails: [`CheckFailure`] names the request whose response
//! was wrong and what was wrong with it, and `Pre` marks a step as a
//! precondition of the check. The HTTP layer, the shared context and every
//! check return it, so it sits below them all and imports none of them.

/// Why a check did not pass. `request` is the method plus the URL path (and
/// query) of the request whose response was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckFailure {
    /// Something the check needs (usually a push) did not work, so the
    /// check itself could not be exercised.
    #[error("precondition: {0}")]
    Precondition(String),
    /// Wrong status code.
    #[error("{request}: expected status {expected}, got {got}{}", body_suffix(.body))]
    Status {
        request: String,
        expected: String,
        got: u16,
        body: String,
    },
    /// A required response header is absent.
    #[error("{request}: missing header {header}")]
    MissingHeader { request: String, header: String },
    /// A response header has the wrong value.
    #[error("{request}: header {header}: expected {expected}, got {got:?}")]
    Header {
        request: String,
        header: String,
        expected: String,
        got: String,
    },
    /// The status was right but the error body lacks the expected code.
    #[error("{request}: expected error code {expected}, got {}{}", codes(.got), body_suffix(.body))]
    ErrorCode {
        request: String,
        expected: String,
        got: Vec<String>,
        body: String,
    },
    /// The response body is not what the spec requires.
    #[error("{request}: body: {detail}")]
    Body { request: String, detail: String },
    /// Anything else about a response (explained in `detail`).
    #[error("{request}: {detail}")]
    Other { request: String, detail: String },
    /// The request could not be sent or its response not read.
    #[error("{request}: request failed: {error}")]
    Transport { request: String, error: String },
}

impl CheckFailure {
    /// Turns any failure into a precondition failure described by `what`
    /// (a precondition failure stays as it is).
    pub fn into_precondition(self, what: &str) -> CheckFailure {
        match self {
            CheckFailure::Precondition(_) => self,
            other => CheckFailure::Precondition(format!("{what}: {other}")),
        }
    }
}

/// Extension for `Result` to mark a step as a precondition of the check.
pub(crate) trait Pre<T> {
    /// Reports a failure of this step as "precondition: <what>: <failure>".
    fn pre(self, what: &str) -> Result<T, CheckFailure>;
}

impl<T> Pre<T> for Result<T, CheckFailure> {
    fn pre(self, what: &str) -> Result<T, CheckFailure> {
        self.map_err(|e| e.into_precondition(what))
    }
}

fn body_suffix(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(" (body: {body})")
    }
}

fn codes(got: &[String]) -> String {
    if got.is_empty() {
        "no error code".to_string()
    } else {
        got.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_messages_name_expected_and_got() {
        let f = CheckFailure::Status {
            request: "GET /v2/".into(),
            expected: "200".into(),
            got: 500,
            body: "oops".into(),
        };
        assert_eq!(
            f.to_string(),
            "GET /v2/: expected status 200, got 500 (body: oops)"
        );
        let f = CheckFailure::ErrorCode {
            request: "PUT /x".into(),
            expected: "DIGEST_INVALID".into(),
            got: vec![],
            body: String::new(),
        };
        assert_eq!(
            f.to_string(),
            "PUT /x: expected error code DIGEST_INVALID, got no error code"
        );
    }

    #[test]
    fn precondition_wraps_once() {
        let f = CheckFailure::MissingHeader {
            request: "POST /u".into(),
            header: "Location".into(),
        };
        let p = f.into_precondition("starting an upload");
        assert_eq!(
            p.to_string(),
            "precondition: starting an upload: POST /u: missing header Location"
        );
        let again = p.clone().into_precondition("outer");
        assert_eq!(again, p);
    }
}
