//! The sealvol registry API (`/api/v1`, SPEC.md §7 and §8) from the client
//! side, as every caller shares it: whether a registry has the API (asked
//! once per [`Remote`]), sending a call and mapping a refused one to one
//! actionable error (`CallCtx`: the volume calls of
//! [`crate::volumes`], the sync and secret calls of [`crate::sync`], the
//! key calls of [`crate::keys`] each say what their errors name), and
//! decoding an answer. The endpoints themselves live in those modules.

use bytes::Bytes;
use reqwest::Method;
use sealvol_spec::api::{ApiInfo, ErrorBody, API};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::remote::{ApiAnswer, Remote};
use crate::{Error, TransportError};

/// What the registry says about its volume API: `None` when it has none.
/// Asked once per [`Remote`] (and its clones); a registry that cannot be
/// reached, or fails with 5xx on every attempt, is an error and is asked
/// again next time.
pub async fn info(remote: &Remote) -> Result<Option<ApiInfo>, Error> {
    let probe = || async {
        let answer = remote.api(Method::GET, "", None, None).await?;
        let info = match answer.status {
            200 => serde_json::from_slice::<ApiInfo>(&answer.body)
                .ok()
                .filter(|i| i.api == API),
            _ => None,
        };
        tracing::debug!(
            registry = remote.registry(),
            status = answer.status,
            api = info.is_some(),
            "probing /api/v1"
        );
        Ok::<_, Error>(info)
    };
    Ok(remote.api_info_cell().get_or_try_init(probe).await?.clone())
}

/// Whether the registry implements SPEC.md §7.
pub async fn supported(remote: &Remote) -> Result<bool, Error> {
    Ok(info(remote).await?.is_some())
}

/// The registry's [`ApiInfo`], or the error "registry HOST does not
/// support `what` (it has no sealvol volume API)".
pub async fn require(remote: &Remote, what: &str) -> Result<ApiInfo, Error> {
    info(remote)
        .await?
        .ok_or_else(|| unsupported(remote.registry(), what))
}

fn unsupported(registry: &str, what: &str) -> Error {
    Error::Transport(TransportError::Unsupported {
        registry: registry.to_string(),
        what: format!("{what} (it has no sealvol volume API)"),
    })
}

/// What the errors of one volume API call name, for [`send`], [`get`] and
/// [`decode`]: the calls of this module (SPEC.md §7) and those of
/// [`crate::sync`] (SPEC.md §8) each have their own.
pub(crate) trait CallCtx {
    /// The section of SPEC.md that describes the answers.
    const SPEC: &'static str;
    /// What a refused call fails with: [`Error`], or one that keeps the
    /// API error code.
    type Error: From<Error> + Into<Error>;
    fn registry(&self) -> &str;
    /// The call, to start a message: `listing syncs`, `version history of
    /// bdn:ns/vol`.
    fn call(&self) -> String;
    /// The error for an answer other than 2xx.
    fn refused(&self, status: u16, body: &[u8]) -> Self::Error;
}

/// The code and message of the first error in an API error body (SPEC.md
/// §7.2) as they came; empty strings when the body is not one.
pub(crate) fn error_code(body: &[u8]) -> (String, String) {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|b| b.errors.into_iter().next())
        .map(|i| (i.code, i.message))
        .unwrap_or_default()
}

/// A request body as JSON. The bodies are plain structs of strings.
pub(crate) fn to_body(body: &impl serde::Serialize) -> Value {
    serde_json::to_value(body).expect("a request body serializes")
}

/// The error for a refused call that no code explains to the caller:
/// 401 and 403 are denied; anything else names `call`, the status, the
/// code and the message as they came.
pub(crate) fn other_failure(
    registry: &str,
    status: u16,
    code: &str,
    message: &str,
    call: &str,
) -> TransportError {
    let message = one_line(message);
    match status {
        401 | 403 => TransportError::Denied {
            registry: registry.to_string(),
            message: if message.is_empty() {
                format!("HTTP {status}")
            } else {
                message
            },
        },
        _ => TransportError::Registry {
            registry: registry.to_string(),
            message: format!(
                "{call}: HTTP {status}{}{code}{}{message}",
                if code.is_empty() { "" } else { " " },
                if message.is_empty() { "" } else { ": " },
            ),
        },
    }
}

/// The first line of `s` that is not blank, trimmed, at most 300
/// characters: a registry's words, fit for a one-line message.
pub(crate) fn one_line(s: &str) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(300).collect()
}

/// Sends a call and returns the body of a 2xx answer; a registry that
/// cannot be reached, or refuses the call, is `ctx`'s error.
pub(crate) async fn send<C: CallCtx>(
    remote: &Remote,
    ctx: &C,
    method: Method,
    path: &str,
    repo: Option<&str>,
    body: Option<&Value>,
) -> Result<Bytes, C::Error> {
    let answer = remote
        .api(method, path, repo, body)
        .await
        .map_err(|e| C::Error::from(Error::from(e)))?;
    answered(ctx, answer)
}

/// The body of a 2xx answer, or `ctx`'s error for any other.
pub(crate) fn answered<C: CallCtx>(ctx: &C, answer: ApiAnswer) -> Result<Bytes, C::Error> {
    if (200..300).contains(&answer.status) {
        Ok(answer.body)
    } else {
        Err(ctx.refused(answer.status, &answer.body))
    }
}

/// `GET`s `path` and decodes the answer.
pub(crate) async fn get<C: CallCtx, T: DeserializeOwned>(
    remote: &Remote,
    ctx: &C,
    path: &str,
    repo: Option<&str>,
) -> Result<T, Error> {
    let bytes = send(remote, ctx, Method::GET, path, repo, None)
        .await
        .map_err(Into::into)?;
    decode(ctx, &bytes)
}

/// An answer as SPEC.md describes it, or an error naming the call.
pub(crate) fn decode<C: CallCtx, T: DeserializeOwned>(ctx: &C, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Transport(TransportError::Registry {
            registry: ctx.registry().to_string(),
            message: format!(
                "{}: the answer is not what SPEC.md {} describes ({e})",
                ctx.call(),
                C::SPEC
            ),
        })
    })
}

/// Percent-encodes what is not unreserved in a path segment or query value
/// (tokens and holders come from elsewhere; names and digests never need
/// it).
pub(crate) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A duration in the largest whole unit: `7 days`, `1 hour`, `90 seconds`.
pub fn human_seconds(secs: u64) -> String {
    let (n, unit) = match secs {
        0 => (0, "second"),
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_whole_units() {
        assert_eq!(human_seconds(604_800), "7 days");
        assert_eq!(human_seconds(86_400), "1 day");
        assert_eq!(human_seconds(7_200), "2 hours");
        assert_eq!(human_seconds(120), "2 minutes");
        assert_eq!(human_seconds(61), "61 seconds");
    }

    #[test]
    fn segments_are_escaped() {
        assert_eq!(segment("abc-1.2_x"), "abc-1.2_x");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
