//! What the sources that speak plain HTTP share (`hf://`, `gs://`, and the
//! blob reads of `oci://` from an open registry): one client setup, one
//! reading of failures (a request that got no answer, an answer other than
//! 2xx, a body cut short), and the checks on the URLs and tokens they are
//! configured with. Each source still says in its own words what a refusal
//! means (a gated Hub repository, a bucket that does not exist).
//!
//! Messages made here are one line and never hold a request's URL: after a
//! redirect it can be a signed CDN URL, and messages end up in job records
//! and logs. Answers are read up to a cap, so a broken or hostile server
//! cannot fill the registry's memory.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, TryStreamExt};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::HeaderMap;

use crate::net::{refused_in, NetPolicy, Refused};
use crate::{ByteStream, ErrorKind, SyncError};

/// Characters left as they are in a URL path segment: the unreserved set
/// of RFC 3986, as Python's `quote(..., safe="")` does.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Redirects followed, as browsers and reqwest's default allow.
const MAX_REDIRECTS: usize = 10;
/// Most bytes of an error answer read for its reason; the rest is dropped.
const ERROR_BODY_CAP: usize = 64 << 10;
/// Most bytes of a listing page or other JSON answer.
const BODY_CAP: usize = 64 << 20;

/// Percent-encodes one path segment (a `/` in it is encoded too).
pub(crate) fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// The HTTP client every HTTP source uses: rustls, a connect timeout so a
/// dead host fails fast (and is retried), and a read timeout so a stalled
/// download fails instead of hanging the job; no total timeout, since a
/// large file takes as long as it takes. Every name it resolves and every
/// redirect it follows is checked against `net` (SPEC.md §8.4).
pub(crate) fn client(uri: &str, net: &NetPolicy) -> Result<reqwest::Client, SyncError> {
    let redirects = net.clone();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("sealvol/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(net.guard()))
        // A redirect to an IP literal resolves nothing: checked here.
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error("too many redirects");
            }
            match redirects.check_url("", attempt.url().as_str()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(Refused(e.message.trim_start_matches(": ").to_string())),
            }
        }))
        .build()
        .map_err(|e| {
            SyncError::new(
                ErrorKind::Internal,
                format!(
                    "{uri}: cannot make an HTTP client: {}",
                    first_line(&error_chain(&e.without_url()))
                ),
            )
        })
}

/// The client of a token exchange: as [`client`], but it follows no
/// redirect. A token endpoint has no reason to send one, and following it
/// would carry the credential in the request's body to wherever it points.
pub(crate) fn exchange_client(what: &str, net: &NetPolicy) -> Result<reqwest::Client, SyncError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("sealvol/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(net.guard()))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| {
            SyncError::new(
                ErrorKind::Internal,
                format!(
                    "{what}: cannot make an HTTP client: {}",
                    first_line(&error_chain(&e.without_url()))
                ),
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

/// An answer other than 2xx, its body read up to 64 KiB, for a source to
/// say what it means.
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
    let mut resp = req.send().await.map_err(|e| request_error(uri, what, e))?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    // The reason is in the first bytes, if anywhere; a body that breaks
    // off still gives the status.
    let body = read_up_to(&mut resp, ERROR_BODY_CAP)
        .await
        .map(|(body, _)| body)
        .unwrap_or_default();
    Err(refused(Refusal {
        status,
        headers,
        body,
    }))
}

/// The whole body of an answer that is read into memory (a listing page,
/// a JSON answer): at most 64 MiB, or the job fails as `INVALID_SOURCE`.
pub(crate) async fn body(
    mut resp: reqwest::Response,
    uri: &str,
    what: &str,
) -> Result<Bytes, SyncError> {
    let too_large = || {
        SyncError::new(
            ErrorKind::InvalidSource,
            format!(
                "{uri}: {what}: the answer is larger than {} MiB, more than a listing page or a JSON answer can be; is the endpoint the source's API?",
                BODY_CAP >> 20
            ),
        )
    };
    if resp.content_length().is_some_and(|n| n > BODY_CAP as u64) {
        return Err(too_large());
    }
    match read_up_to(&mut resp, BODY_CAP).await {
        Ok((body, false)) => Ok(body),
        Ok((_, true)) => Err(too_large()),
        Err(e) => Err(request_error(uri, what, e)),
    }
}

/// Reads the body of `resp` until it ends or holds more than `cap` bytes;
/// the bytes read (at most `cap`), and whether there were more.
pub(crate) async fn read_up_to(
    resp: &mut reqwest::Response,
    cap: usize,
) -> Result<(Bytes, bool), reqwest::Error> {
    let mut out = BytesMut::new();
    while let Some(piece) = resp.chunk().await? {
        if out.len() + piece.len() > cap {
            out.extend_from_slice(&piece[..cap - out.len()]);
            return Ok((out.freeze(), true));
        }
        out.extend_from_slice(&piece);
    }
    Ok((out.freeze(), false))
}

/// The body of an answer as an object's bytes; a body cut short fails the
/// object as [`request_error`] says.
pub(crate) fn stream(resp: reqwest::Response, uri: &str, key: &str) -> ByteStream {
    let uri = uri.to_string();
    let key = key.to_string();
    resp.bytes_stream()
        .map_err(move |e| request_error(&uri, &key, e))
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
/// a redirect loop or a URL reqwest cannot send is not. The message leaves
/// out the URL reqwest names (a redirect's target can be signed).
pub(crate) fn request_error(uri: &str, what: &str, e: reqwest::Error) -> SyncError {
    // A refused address is refused again on a retry: fail now, and say why.
    if let Some(why) = refused_in(&e) {
        return SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {what}: {why}"));
    }
    let kind = if let Some(status) = e.status() {
        SyncError::from_status(status.as_u16(), String::new()).kind
    } else if e.is_builder() || e.is_redirect() {
        ErrorKind::InvalidSource
    } else {
        ErrorKind::Transient
    };
    let e = e.without_url();
    SyncError::new(
        kind,
        format!("{uri}: {what}: {}", first_line(&error_chain(&e))),
    )
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

/// The first line of `s` (of its text, when it starts with blank lines),
/// short enough for a job's message.
pub(crate) fn first_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
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

/// An endpoint URL from configuration, without its trailing `/`, whose
/// host, when an IP literal, `net` allows.
pub(crate) fn endpoint_url(
    uri: &str,
    what: &str,
    raw: &str,
    net: &NetPolicy,
) -> Result<String, SyncError> {
    let trimmed = raw.trim().trim_end_matches('/');
    match url::Url::parse(trimmed) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            net.check_url(uri, trimmed)?;
            Ok(trimmed.to_string())
        }
        _ => Err(SyncError::new(
            ErrorKind::InvalidSource,
            format!("{uri}: {what} {raw:?} is not an http:// or https:// URL"),
        )),
    }
}

/// The reason an error body gives, as [`first_line`]. The Hub and GCS
/// answer JSON with the reason in `error` (or `error.message`).
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
        Some(reason) => first_line(&reason),
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
        assert_eq!(
            body_reason(br#"{"error":"Not Found\nat line 2\r\nline 3"}"#),
            "Not Found"
        );
        assert_eq!(body_reason(b"\n\n  <html>\r<body>"), "<html>");
    }

    #[tokio::test]
    async fn request_errors_name_no_url() {
        // Nothing listens on port 1: the connection is refused at once.
        let e = reqwest::Client::new()
            .get("http://127.0.0.1:1/cdn/file?X-Amz-Signature=s3cr3t")
            .send()
            .await
            .unwrap_err();
        let e = request_error("hf://org/repo", "model.bin", e);
        assert_eq!(e.kind, ErrorKind::Transient, "{}", e.message);
        assert!(!e.message.contains("s3cr3t"), "{}", e.message);
        assert!(!e.message.contains("127.0.0.1:1"), "{}", e.message);
        assert!(!e.message.contains('\n'), "{}", e.message);
        assert!(
            e.message.starts_with("hf://org/repo: model.bin: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn segments_keep_only_unreserved_characters() {
        assert_eq!(segment("a b/c#?.~_-"), "a%20b%2Fc%23%3F.~_-");
    }
}
