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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
