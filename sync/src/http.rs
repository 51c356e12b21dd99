//! What the sources that speak plain HTTP share (`hf://`, `gs://`, and the
//! blob reads of `oci://` from an open registry): one client setup, one
//! reading of failures (a request that got no answer, an answer other than
//! 2xx, a body cut short), and the checks on the URLs and tokens they are
//! configured with. Each source still says in its own words what a refusal
//! means (a gated Hub repository, a bucket that does not exist).

use std::time::Duration;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::HeaderMap;

use crate::{ByteStream, ErrorKind, SyncError};

/// Characters left as they are in a URL path segment: the unreserved set
/// of RFC 3986, as Python's `quote(..., safe="")` does.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment (a `/` in it is encoded too).
pub(crate) fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// The HTTP client every HTTP source uses: rustls, a connect timeout so a
/// dead host fails fast (and is retried), and a read timeout so a stalled
/// download fails instead of hanging the job; no total timeout, since a
/// large file takes as long as it takes.
pub(crate) fn client(uri: &str) -> Result<reqwest::Client, SyncError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("sealvol/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| {
            SyncError::new(
                ErrorKind::Internal,
                format!("{uri}: cannot make an HTTP client: {e}"),
            )
        })
}

/// A GET of `url`, with the bearer token when there is one.
pub(crate) fn get(
    http: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    let req = http.get(url);
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

/// An answer other than 2xx, read whole, for a source to say what it
/// means.
pub(crate) struct Refusal {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Refusal {
    /// A header's value, trimmed; `None` when absent or blank.
    pub fn header(&self, name: &str) -> Option<String> {
        header(&self.headers, name)
    }

    /// Why, as the body says it ([`body_reason`]).
    pub fn reason(&self) -> String {
        body_reason(&self.body)
    }
}

/// Sends `req` and returns a 2xx response. A request that got no answer is
/// [`request_error`]; any other answer is the error `refused` makes of it.
/// `what` names the object in messages.
pub(crate) async fn send(
    req: reqwest::RequestBuilder,
    uri: &str,
    what: &str,
    refused: impl FnOnce(Refusal) -> SyncError,
) -> Result<reqwest::Response, SyncError> {
    let resp = req.send().await.map_err(|e| request_error(uri, what, &e))?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.unwrap_or_default();
    Err(refused(Refusal {
        status,
        headers,
        body,
    }))
}

/// The whole body of an answer.
pub(crate) async fn body(
    resp: reqwest::Response,
    uri: &str,
    what: &str,
) -> Result<Bytes, SyncError> {
    resp.bytes().await.map_err(|e| request_error(uri, what, &e))
}

/// The body of an answer as an object's bytes; a body cut short fails the
/// object as [`request_error`] says.
pub(crate) fn stream(resp: reqwest::Response, uri: &str, key: &str) -> ByteStream {
    let uri = uri.to_string();
    let key = key.to_string();
    resp.bytes_stream()
        .map_err(move |e| request_error(&uri, &key, &e))
        .boxed()
}

/// A JSON answer as `T`, or the error that `endpoint` answered something
/// else.
pub(crate) fn json<T: serde::de::DeserializeOwned>(
    uri: &str,
    what: &str,
    endpoint: &str,
    body: &[u8],
) -> Result<T, SyncError> {
    serde_json::from_slice(body).map_err(|e| {
        SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: {what}: unexpected answer from {endpoint} ({e})"),
        )
    })
}

/// A header's value, trimmed; `None` when absent, blank or not text.
pub(crate) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// What a failed request (no HTTP answer, or a body cut short) means for
/// the job: connection failures, timeouts and resets are worth retrying;
/// a redirect loop or a URL reqwest cannot send is not.
pub(crate) fn request_error(uri: &str, what: &str, e: &reqwest::Error) -> SyncError {
    let kind = if let Some(status) = e.status() {
        SyncError::from_status(status.as_u16(), String::new()).kind
    } else if e.is_builder() || e.is_redirect() {
        ErrorKind::InvalidSource
    } else {
        ErrorKind::Transient
    };
    SyncError::new(kind, format!("{uri}: {what}: {}", error_chain(e)))
}

/// An error with its causes, on one line: reqwest's own text ("error
/// sending request") says little without them.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The first line of `s`, short enough for a job's message.
pub(crate) fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(300).collect()
}

/// Checks a secret before it goes into an `Authorization` header, so a bad
/// one fails the job as `INVALID_SOURCE` instead of every request.
pub(crate) fn bearer_token(uri: &str, secret: Option<&str>) -> Result<Option<String>, SyncError> {
    let Some(token) = secret.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        return Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: the secret is not a usable token (it holds a line break or a control character)"),
        ));
    }
    Ok(Some(token.to_string()))
}

/// An endpoint URL from configuration, without its trailing `/`.
pub(crate) fn endpoint_url(uri: &str, what: &str, raw: &str) -> Result<String, SyncError> {
    let trimmed = raw.trim().trim_end_matches('/');
    match url::Url::parse(trimmed) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(trimmed.to_string())
        }
        _ => Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: {what} {raw:?} is not an http:// or https:// URL"),
        )),
    }
}

/// The first line of an error body, short enough for a job's message. The
/// Hub and GCS answer JSON with the reason in `error` (or `error.message`).
pub(crate) fn body_reason(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let from_json = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            e.as_str()
                .or_else(|| e.get("message").and_then(|m| m.as_str()))
                .map(str::to_string)
        });
    match from_json {
        Some(reason) => reason.chars().take(300).collect(),
        None => first_line(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_are_read_for_a_reason() {
        assert_eq!(
            body_reason(br#"{"error":"Repository Not Found"}"#),
            "Repository Not Found"
        );
        assert_eq!(
            body_reason(br#"{"error":{"code":404,"message":"No such bucket"}}"#),
            "No such bucket"
        );
        assert_eq!(body_reason(b"plain\nsecond"), "plain");
    }

    #[test]
    fn segments_keep_only_unreserved_characters() {
        assert_eq!(segment("a b/c#?.~_-"), "a%20b%2Fc%23%3F.~_-");
    }
}
