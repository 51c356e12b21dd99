//! Query strings, decoded one way for every endpoint: `key=value` pairs
//! split on `&`, values percent-decoded by the `percent-encoding` crate
//! (invalid escapes stay as they are, invalid UTF-8 becomes U+FFFD). A
//! `+` stays a `+` (RFC 3986; media types such as
//! `application/vnd.x+json` travel unescaped in `artifactType`). Nothing
//! here can fail on what a client sends.

/// The decoded value of the first `key` in `query`; `key` alone has "".
pub(crate) fn param(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| decode(v))
    })
}

/// Whether `key`, `key=true` or `key=1` is in `query`.
pub(crate) fn flag(query: Option<&str>, key: &str) -> bool {
    param(query, key).is_some_and(|v| v.is_empty() || v == "true" || v == "1")
}

/// Decodes `%XX` escapes.
pub(crate) fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Encodes a value for a query string: everything but unreserved
/// characters escaped, so that a name or path holding `&`, `#` or `+`
/// comes back as it was.
pub(crate) fn encode(s: &str) -> String {
    const SAFE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~')
        .remove(b'/')
        .remove(b':');
    percent_encoding::utf8_percent_encode(s, SAFE).to_string()
}

/// The most items one page of an `/api/v1` list holds, whatever `n` asks.
pub(crate) const MAX_PAGE: usize = 10_000;

/// `?n=&last=` of a paginated `/api/v1` list (SPEC.md §7.2): at most `n`
/// items (all without it, at most [`MAX_PAGE`]) after the one `last`
/// names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Page {
    pub n: Option<usize>,
    pub last: Option<String>,
}

impl Page {
    /// From a query; `n` that is not a number is refused.
    pub fn of(query: Option<&str>) -> Result<Page, String> {
        let n = match param(query, "n") {
            Some(v) => Some(
                v.parse::<usize>()
                    .map_err(|_| format!("n={v:?} is not a number"))?
                    .min(MAX_PAGE),
            ),
            None => None,
        };
        Ok(Page {
            n,
            last: param(query, "last").filter(|l| !l.is_empty()),
        })
    }

    /// The page of `items` after the one whose `key` is `last`, and the
    /// key of its last item when more follow. In a list `sorted` by key, a
    /// `last` that is gone (removed meanwhile) starts after where it would
    /// be; in another order it ends the list.
    pub fn take<T>(
        &self,
        items: Vec<T>,
        key: impl Fn(&T) -> String,
        sorted: bool,
    ) -> (Vec<T>, Option<String>) {
        let start = match &self.last {
            None => 0,
            Some(last) if sorted => items.partition_point(|i| key(i) <= *last),
            Some(last) => items
                .iter()
                .position(|i| key(i) == *last)
                .map_or(items.len(), |p| p + 1),
        };
        let mut rest = items.into_iter().skip(start);
        let Some(n) = self.n else {
            return (rest.collect(), None);
        };
        let page: Vec<T> = rest.by_ref().take(n).collect();
        let next = match rest.next() {
            Some(_) => page.last().map(&key),
            None => None,
        };
        (page, next)
    }
}

/// The `Link` header of a next page: `path?{extra&}n=N&last=LAST`.
pub(crate) fn next_link(path: &str, extra: &[(&str, &str)], n: usize, last: &str) -> String {
    let mut q: Vec<String> = extra
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    q.push(format!("n={n}"));
    q.push(format!("last={}", encode(last)));
    format!("<{path}?{}>; rel=\"next\"", q.join("&"))
}

/// Query parameter `key` of `req`, decoded.
pub(crate) fn query_param(req: &axum::extract::Request, key: &str) -> Option<String> {
    crate::http::query::param(req.uri().query(), key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pages_follow_last_and_say_what_comes_next() {
        let items: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let page = |q: &str| {
            Page::of(Some(q))
                .unwrap()
                .take(items.clone(), |s| s.clone(), true)
        };
        assert_eq!(
            page("n=2"),
            (vec!["a".into(), "b".into()], Some("b".into()))
        );
        assert_eq!(
            page("n=2&last=b"),
            (vec!["c".into(), "d".into()], Some("d".into()))
        );
        assert_eq!(page("n=2&last=d"), (vec!["e".into()], None));
        assert_eq!(page("n=3&last=c").1, None);
        assert_eq!(page("last=a").0.len(), 4);
        assert_eq!(page("n=0").0.len(), 0);
        // Gone from a sorted list: after where it was; from another, the end.
        assert_eq!(page("n=1&last=bb").0, vec!["c".to_string()]);
        let unsorted = Page::of(Some("n=1&last=bb")).unwrap();
        assert!(unsorted
            .take(items.clone(), |s| s.clone(), false)
            .0
            .is_empty());
        assert!(Page::of(Some("n=x")).is_err());
        assert_eq!(Page::of(Some("n=99999999")).unwrap().n, Some(MAX_PAGE));
        assert_eq!(
            next_link("/api/v1/volumes", &[("namespace", "w")], 2, "w/a&b c"),
            "</api/v1/volumes?namespace=w&n=2&last=w/a%26b%20c>; rel=\"next\""
        );
        assert_eq!(
            decode(&encode("<img src=x onerror=alert(1)>")),
            "<img src=x onerror=alert(1)>"
        );
    }

    #[test]
    fn decoding_query_values() {
        assert_eq!(decode("sha256%3Aab"), "sha256:ab");
        assert_eq!(decode("a%2Fb"), "a/b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%aé"), "%aé");
        assert_eq!(decode("%zz%C3%A9"), "%zzé");
        assert_eq!(decode("application/vnd.x+json"), "application/vnd.x+json");
        let q = Some("n=2&last=%aé&dry_run&mount=sha256%3A00");
        assert_eq!(param(q, "last").as_deref(), Some("%aé"));
        assert_eq!(param(q, "mount").as_deref(), Some("sha256:00"));
        assert_eq!(param(q, "from"), None);
        assert!(flag(q, "dry_run") && !flag(q, "n"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any query decodes without panicking, and an encoded value
        /// decodes back to itself.
        #[test]
        fn any_query_decodes_and_encoded_values_round_trip(
            q in "\\PC{0,40}",
            v in "\\PC{0,20}",
        ) {
            let _ = param(Some(&q), "last");
            let _ = flag(Some(&q), "dry_run");
            let enc = percent_encoding::utf8_percent_encode(&v, percent_encoding::NON_ALPHANUMERIC);
            let query = format!("x=1&last={enc}");
            prop_assert_eq!(param(Some(&query), "last"), Some(v));
        }
    }
}
