//! The HTTP side: a blocking client bound to one registry base URL, a
//! response type with the assertions checks need, and `Link` header parsing.

use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::HeaderMap;
use reqwest::{Method, Url};

use crate::error::RunError;
use crate::failure::CheckFailure;

/// At most this many characters of a response body go into a failure reason.
const BODY_SNIPPET: usize = 240;

/// A registry reached over HTTP(S).
pub struct Registry {
    base: Url,
    /// Redirects disabled: uploads must see `Location` themselves.
    client: Client,
    /// Redirects followed (up to 10): pulls, which may go to storage.
    follow: Client,
    /// Basic credentials sent with every request to the registry's own
    /// origin (never to a storage redirect).
    credentials: Option<(String, String)>,
}

impl Registry {
    /// Builds clients for `url` (scheme, host, port and an optional path
    /// prefix; no query or fragment).
    pub fn new(url: &str, timeout: Duration) -> Result<Registry, RunError> {
        let invalid = |reason: &str| RunError::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let base = Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if base.host_str().is_none() {
            return Err(invalid("no host"));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("a query or fragment is not allowed"));
        }
        let build = |policy: reqwest::redirect::Policy| {
            Client::builder()
                .redirect(policy)
                .timeout(timeout)
                .connect_timeout(Duration::from_secs(10))
                .user_agent(concat!("sealvol-conformance/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| RunError::Client(error_chain(&e)))
        };
        Ok(Registry {
            client: build(reqwest::redirect::Policy::none())?,
            follow: build(reqwest::redirect::Policy::limited(10))?,
            base,
            credentials: None,
        })
    }

    /// Sends `user` and `password` as Basic credentials from now on.
    pub fn with_credentials(mut self, user: String, password: String) -> Registry {
        self.credentials = Some((user, password));
        self
    }

    /// The base URL as given.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `path` (starting with `/v2/`) under the base URL, with `query` pairs
    /// (form-encoded, so `+` and `/` in values survive).
    pub fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut u = self.base.clone();
        let prefix = self.base.path().trim_end_matches('/');
        u.set_path(&format!("{prefix}{path}"));
        u.set_query(None);
        if !query.is_empty() {
            u.query_pairs_mut().extend_pairs(query);
        }
        u
    }

    /// Resolves a `Location` (absolute, or relative to the base URL).
    pub fn resolve(&self, location: &str) -> Result<Url, String> {
        self.base
            .join(location)
            .map_err(|e| format!("cannot resolve Location {location:?}: {e}"))
    }

    /// How a request to `url` is named in failure reasons: method plus path
    /// and query when on the registry's origin, the full URL otherwise.
    pub fn describe(&self, method: &Method, url: &Url) -> String {
        if url.origin() == self.base.origin() {
            match url.query() {
                Some(q) => format!("{method} {}?{q}", url.path()),
                None => format!("{method} {}", url.path()),
            }
        } else {
            format!("{method} {url}")
        }
    }

    /// Sends one request; `follow` chooses the redirect-following client;
    /// `build` adds headers and body.
    pub fn send(
        &self,
        method: Method,
        url: Url,
        follow: bool,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<Resp, CheckFailure> {
        let request = self.describe(&method, &url);
        let client = if follow { &self.follow } else { &self.client };
        let own = url.origin() == self.base.origin();
        let mut rb = client.request(method, url);
        if let (true, Some((u, p))) = (own, &self.credentials) {
            rb = rb.basic_auth(u, Some(p));
        }
        let rb = build(rb);
        let resp = rb.send().map_err(|e| CheckFailure::Transport {
            request: request.clone(),
            error: error_chain(&e),
        })?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let declared = headers
            .get(reqwest::header::CONTENT_LENGTH)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string());
        let body = resp.bytes().map_err(|e| CheckFailure::Transport {
            request: request.clone(),
            error: format!(
                "got status {status}, but reading the body failed{}: {}",
                declared
                    .map(|d| format!(" (Content-Length: {d})"))
                    .unwrap_or_default(),
                error_chain(&e)
            ),
        })?;
        Ok(Resp {
            request,
            status,
            headers,
            body: body.to_vec(),
        })
    }
}

/// An error and its sources, joined with ": ".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        src = s.source();
    }
    out
}

/// A response read to the end.
#[derive(Debug, Clone)]
pub struct Resp {
    /// Method and path (see [`Registry::describe`]).
    pub request: String,
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    /// First value of a header, if present (lossily decoded).
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
    }

    /// All values of a header.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
            .collect()
    }

    /// A header that must be present.
    pub fn require_header(&self, name: &str) -> Result<String, CheckFailure> {
        self.header(name)
            .ok_or_else(|| CheckFailure::MissingHeader {
                request: self.request.clone(),
                header: name.to_string(),
            })
    }

    /// A header that must be present with exactly `expected`.
    pub fn expect_header(&self, name: &str, expected: &str) -> Result<(), CheckFailure> {
        let got = self.require_header(name)?;
        if got == expected {
            Ok(())
        } else {
            Err(self.header_mismatch(name, expected, &got))
        }
    }

    /// A media-type header compared without parameters, case-insensitively.
    pub fn expect_media_type(&self, name: &str, expected: &str) -> Result<(), CheckFailure> {
        let got = self.require_header(name)?;
        let bare = got.split(';').next().unwrap_or("").trim();
        if bare.eq_ignore_ascii_case(expected) {
            Ok(())
        } else {
            Err(self.header_mismatch(name, expected, &got))
        }
    }

    /// `Content-Length` must be present and equal `len`.
    pub fn expect_content_length(&self, len: usize) -> Result<(), CheckFailure> {
        self.expect_header("Content-Length", &len.to_string())
    }

    /// A `Header` failure for this response.
    pub fn header_mismatch(&self, name: &str, expected: &str, got: &str) -> CheckFailure {
        CheckFailure::Header {
            request: self.request.clone(),
            header: name.to_string(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    /// A `Body` failure for this response.
    pub fn body_failure(&self, detail: impl Into<String>) -> CheckFailure {
        CheckFailure::Body {
            request: self.request.clone(),
            detail: detail.into(),
        }
    }

    /// An `Other` failure for this response.
    pub fn other_failure(&self, detail: impl Into<String>) -> CheckFailure {
        CheckFailure::Other {
            request: self.request.clone(),
            detail: detail.into(),
        }
    }

    /// The status must be one of `expected`.
    pub fn expect_status(&self, expected: &[u16]) -> Result<(), CheckFailure> {
        if expected.contains(&self.status) {
            return Ok(());
        }
        let expected = expected
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(" or ");
        Err(CheckFailure::Status {
            request: self.request.clone(),
            expected,
            got: self.status,
            body: self.snippet(),
        })
    }

    /// The status must be `status` and the error body must carry `code`.
    pub fn expect_error(&self, status: u16, code: &str) -> Result<(), CheckFailure> {
        self.expect_status(&[status])?;
        let got = self.error_codes();
        if got.iter().any(|c| c == code) {
            Ok(())
        } else {
            Err(CheckFailure::ErrorCode {
                request: self.request.clone(),
                expected: code.to_string(),
                got,
                body: self.snippet(),
            })
        }
    }

    /// The body must be exactly `expected`.
    pub fn expect_body(&self, expected: &[u8]) -> Result<(), CheckFailure> {
        if self.body == expected {
            Ok(())
        } else {
            Err(self.body_failure(format!(
                "content differs from what was pushed ({} bytes expected, {} received)",
                expected.len(),
                self.body.len()
            )))
        }
    }

    /// The `errors[].code` values of an OCI error body (empty when the body
    /// is not one).
    pub fn error_codes(&self) -> Vec<String> {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&self.body) else {
            return Vec::new();
        };
        v.get("errors")
            .and_then(|e| e.as_array())
            .map(|errs| {
                errs.iter()
                    .filter_map(|e| e.get("code").and_then(|c| c.as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value, CheckFailure> {
        serde_json::from_slice(&self.body)
            .map_err(|e| self.body_failure(format!("not JSON ({e}): {}", self.snippet())))
    }

    /// The start of the body, on one line, for failure reasons.
    pub fn snippet(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let mut one_line: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(BODY_SNIPPET)
            .collect();
        if text.chars().count() > BODY_SNIPPET {
            one_line.push('…');
        }
        one_line.trim().to_string()
    }

    /// The target of the `rel="next"` link across all `Link` headers.
    pub fn next_link(&self) -> Result<Option<String>, CheckFailure> {
        for value in self.header_all("Link") {
            let links = parse_link_header(&value).map_err(|e| {
                self.header_mismatch("Link", "an RFC 8288 link", &format!("{value} ({e})"))
            })?;
            if let Some(l) = links.into_iter().find(|l| l.has_rel("next")) {
                return Ok(Some(l.target));
            }
        }
        Ok(None)
    }
}

/// One link of a `Link` header (RFC 8288).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The URI reference between `<` and `>`.
    pub target: String,
    /// `(name, value)` parameters, names lowercased, quotes removed.
    pub params: Vec<(String, String)>,
}

impl Link {
    /// Whether a `rel` parameter lists `rel` (relation types are
    /// space-separated and case-insensitive).
    pub fn has_rel(&self, rel: &str) -> bool {
        self.params
            .iter()
            .filter(|(k, _)| k == "rel")
            .any(|(_, v)| {
                v.split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case(rel))
            })
    }
}

/// Parses a `Link` header value: `<uri>; param=value; param="value", <uri>…`.
pub fn parse_link_header(value: &str) -> Result<Vec<Link>, String> {
    let s = value.as_bytes();
    let mut i = 0;
    let mut links = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < s.len() && (s[*i] == b' ' || s[*i] == b'\t') {
            *i += 1;
        }
    };
    loop {
        // Skip separators between links (empty list elements are allowed).
        while i < s.len() && (s[i] == b',' || s[i] == b' ' || s[i] == b'\t') {
            i += 1;
        }
        if i >= s.len() {
            break;
        }
        if s[i] != b'<' {
            return Err(format!("expected '<' at byte {i}"));
        }
        let start = i + 1;
        let end = value[start..]
            .find('>')
            .map(|p| start + p)
            .ok_or("unterminated '<'")?;
        let target = value[start..end].trim().to_string();
        i = end + 1;
        let mut params = Vec::new();
        loop {
            skip_ws(&mut i);
            if i >= s.len() || s[i] == b',' {
                break;
            }
            if s[i] != b';' {
                return Err(format!("expected ';' or ',' at byte {i}"));
            }
            i += 1;
            skip_ws(&mut i);
            let name_start = i;
            while i < s.len() && !matches!(s[i], b'=' | b';' | b',' | b' ' | b'\t') {
                i += 1;
            }
            let name = value[name_start..i].to_ascii_lowercase();
            if name.is_empty() {
                return Err(format!("empty parameter name at byte {name_start}"));
            }
            skip_ws(&mut i);
            let mut pval = String::new();
            if i < s.len() && s[i] == b'=' {
                i += 1;
                skip_ws(&mut i);
                if i < s.len() && s[i] == b'"' {
                    i += 1;
                    let mut closed = false;
                    while i < s.len() {
                        match s[i] {
                            b'\\' if i + 1 < s.len() => {
                                pval.push(s[i + 1] as char);
                                i += 2;
                            }
                            b'"' => {
                                i += 1;
                                closed = true;
                                break;
                            }
                            _ => {
                                let ch = value[i..].chars().next().unwrap_or(' ');
                                pval.push(ch);
                                i += ch.len_utf8();
                            }
                        }
                    }
                    if !closed {
                        return Err("unterminated quoted string".to_string());
                    }
                } else {
                    let vstart = i;
                    while i < s.len() && !matches!(s[i], b';' | b',' | b' ' | b'\t') {
                        i += 1;
                    }
                    pval = value[vstart..i].to_string();
                }
            }
            params.push((name, pval));
        }
        links.push(Link { target, params });
    }
    Ok(links)
}

/// `url` with one more query pair appended (keeps existing pairs, such as
/// an upload's state token).
pub fn with_query(mut url: Url, key: &str, value: &str) -> Url {
    url.query_pairs_mut().append_pair(key, value);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_simple_next() {
        let links = parse_link_header(r#"</v2/a/b/tags/list?n=2&last=t2>; rel="next""#).unwrap();
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].target, "/v2/a/b/tags/list?n=2&last=t2");
        assert!(links[0].has_rel("next"));
        assert!(!links[0].has_rel("prev"));
    }

    #[test]
    fn link_unquoted_and_case() {
        let links =
            parse_link_header("<https://r.example/v2/_catalog?n=1&last=x>;REL=Next").unwrap();
        assert_eq!(links[0].target, "https://r.example/v2/_catalog?n=1&last=x");
        assert!(links[0].has_rel("next"));
    }

    #[test]
    fn link_several_links_and_params() {
        let v = r#"<https://a/p1>; rel="prev"; title="a, b; c", <https://a/p3>; rel="next last""#;
        let links = parse_link_header(v).unwrap();
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].params[1], ("title".into(), "a, b; c".into()));
        assert!(links[0].has_rel("prev"));
        assert!(links[1].has_rel("next"));
        assert!(links[1].has_rel("last"));
        assert_eq!(links[1].target, "https://a/p3");
    }

    #[test]
    fn link_escapes_and_empty_elements() {
        let links = parse_link_header(r#", <x>; title="q\"q", ,<y>"#).unwrap();
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].params[0].1, "q\"q");
        assert_eq!(links[1].target, "y");
        assert!(links[1].params.is_empty());
    }

    #[test]
    fn link_malformed() {
        assert!(parse_link_header("/v2/x; rel=next").is_err());
        assert!(parse_link_header("<unterminated; rel=next").is_err());
        assert!(parse_link_header(r#"<x>; rel="next"#).is_err());
        assert!(parse_link_header("<x> rel=next").is_err());
        assert_eq!(parse_link_header("").unwrap(), vec![]);
    }

    #[test]
    fn urls_keep_prefix_and_encode_query() {
        let r = Registry::new("http://127.0.0.1:5000/prefix/", Duration::from_secs(1)).unwrap();
        let u = r.url(
            "/v2/a/referrers/sha256:00",
            &[("artifactType", "application/vnd.x+json")],
        );
        assert_eq!(
            u.as_str(),
            "http://127.0.0.1:5000/prefix/v2/a/referrers/sha256:00?artifactType=application%2Fvnd.x%2Bjson"
        );
        assert_eq!(
            r.describe(&Method::GET, &u),
            "GET /prefix/v2/a/referrers/sha256:00?artifactType=application%2Fvnd.x%2Bjson"
        );
        let abs = r.resolve("/v2/a/blobs/uploads/u1?_state=s").unwrap();
        assert_eq!(
            abs.as_str(),
            "http://127.0.0.1:5000/v2/a/blobs/uploads/u1?_state=s"
        );
        let put = with_query(abs, "digest", "sha256:ab");
        assert_eq!(put.query(), Some("_state=s&digest=sha256%3Aab"));
        let elsewhere = r.resolve("https://storage.example/up/1").unwrap();
        assert_eq!(
            r.describe(&Method::PUT, &elsewhere),
            "PUT https://storage.example/up/1"
        );
    }

    #[test]
    fn bad_urls_are_rejected() {
        for u in ["ftp://x", "not a url", "http://x/?q=1", "http://x/#f"] {
            assert!(Registry::new(u, Duration::from_secs(1)).is_err(), "{u}");
        }
    }
}
