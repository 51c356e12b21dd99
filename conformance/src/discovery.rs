//! Content discovery workflow: the tags list and its pagination, the
//! referrers API (with `OCI-Subject` on push and `artifactType`
//! filtering), and the repository catalog.

use reqwest::{Method, Url};
use serde_json::Value;

use crate::check::{Check, CheckResultOf, Workflow};
use crate::content::{sha256_digest, Manifest, ANN_PURPOSE, ANN_RUN, OCI_INDEX, OCI_MANIFEST};
use crate::ctx::{Ctx, REFERRER_A_TYPE, REFERRER_B_CONFIG};
use crate::failure::{CheckFailure, Pre};
use crate::http::Resp;

/// Pages followed at most when collecting a paginated list.
const MAX_PAGES: usize = 1000;

pub(crate) fn checks() -> Vec<Check> {
    use Workflow::Discovery;
    vec![
        Check::new(Discovery, "tags list is complete and sorted", tags_list),
        Check::new(
            Discovery,
            "tags list ?n=2 gives 2 tags and a Link rel=\"next\"",
            tags_first_page,
        ),
        Check::new(
            Discovery,
            "tags list ?n=2&last=<tag> continues after <tag>",
            tags_next_page,
        ),
        Check::new(
            Discovery,
            "manifest PUT with a subject answers OCI-Subject",
            oci_subject,
        ),
        Check::new(
            Discovery,
            "referrers lists manifests with their artifactType",
            referrers_list,
        ),
        Check::new(
            Discovery,
            "referrers artifactType falls back to the config mediaType",
            referrers_config_type,
        ),
        Check::new(
            Discovery,
            "referrers descriptors carry the manifests' annotations",
            referrers_annotations,
        ),
        Check::new(
            Discovery,
            "referrers ?artifactType= filters, with OCI-Filters-Applied",
            referrers_filter,
        ),
        Check::new(
            Discovery,
            "referrers of an unknown digest is an empty index (200)",
            referrers_unknown,
        ),
        Check::new(
            Discovery,
            "referrers with a malformed digest answers 400",
            referrers_malformed,
        ),
        Check::new(Discovery, "_catalog lists the repository", catalog),
    ]
}

// ---- tags ----------------------------------------------------------------

/// The `tags` of one tags-list response, after checking `name`.
fn tags_of(ctx: &Ctx, r: &Resp) -> Result<Vec<String>, CheckFailure> {
    r.expect_status(&[200])?;
    let v = r.json()?;
    if v.get("name").and_then(Value::as_str) != Some(ctx.repo.as_str()) {
        return Err(r.body_failure(format!(
            "\"name\" is {}, expected {:?}",
            v.get("name").unwrap_or(&Value::Null),
            ctx.repo
        )));
    }
    match v.get("tags") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| r.body_failure(format!("tag {t} is not a string")))
            })
            .collect(),
        Some(Value::Null) | None => Ok(Vec::new()),
        Some(other) => Err(r.body_failure(format!("\"tags\" is not an array: {other}"))),
    }
}

fn tags_url(ctx: &Ctx, query: &[(&str, &str)]) -> Url {
    ctx.reg.url(&format!("/v2/{}/tags/list", ctx.repo), query)
}

/// Every tag of the repository, following `Link` pages if the registry
/// paginates even without `n`.
fn all_tags(ctx: &Ctx) -> Result<Vec<String>, CheckFailure> {
    let mut url = tags_url(ctx, &[]);
    let mut tags = Vec::new();
    for _ in 0..MAX_PAGES {
        let r = ctx.reg.send(Method::GET, url, true, |b| b)?;
        tags.extend(tags_of(ctx, &r)?);
        match r.next_link()? {
            Some(next) => url = ctx.reg.resolve(&next).map_err(|d| r.other_failure(d))?,
            None => return Ok(tags),
        }
    }
    Err(CheckFailure::Other {
        request: format!("GET /v2/{}/tags/list", ctx.repo),
        detail: format!("more than {MAX_PAGES} pages"),
    })
}

/// Lexical order: the spec says "lexical (i.e. case-insensitive
/// alphanumeric) order"; byte order and case-insensitive order are both
/// accepted.
fn is_lexically_sorted(tags: &[String]) -> bool {
    let bytewise = tags.windows(2).all(|w| w[0] <= w[1]);
    let folded = tags
        .windows(2)
        .all(|w| w[0].to_ascii_lowercase() <= w[1].to_ascii_lowercase());
    bytewise || folded
}

fn tags_list(ctx: &mut Ctx) -> CheckResultOf {
    let ours = ctx.listed_tags()?;
    let tags = all_tags(ctx)?;
    let request = format!("GET /v2/{}/tags/list", ctx.repo);
    if let Some(missing) = ours.iter().find(|t| !tags.contains(t)) {
        return Err(CheckFailure::Body {
            request,
            detail: format!("pushed tag {missing} is not listed"),
        });
    }
    if !is_lexically_sorted(&tags) {
        return Err(CheckFailure::Body {
            request,
            detail: format!("tags are not in lexical order: {}", preview(&tags)),
        });
    }
    Ok(())
}

fn preview(tags: &[String]) -> String {
    let mut s = tags.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
    if tags.len() > 8 {
        s.push_str(&format!(", … ({} tags)", tags.len()));
    }
    s
}

fn tags_first_page(ctx: &mut Ctx) -> CheckResultOf {
    ctx.listed_tags()?;
    let full = all_tags(ctx).pre("listing all tags")?;
    let r = ctx
        .reg
        .send(Method::GET, tags_url(ctx, &[("n", "2")]), true, |b| b)?;
    let page = tags_of(ctx, &r)?;
    if page != full[..2.min(full.len())] {
        return Err(r.body_failure(format!(
            "expected the first 2 tags [{}], got [{}]",
            preview(&full[..2.min(full.len())]),
            preview(&page)
        )));
    }
    if full.len() <= 2 {
        return Ok(());
    }
    let Some(next) = r.next_link()? else {
        return Err(CheckFailure::MissingHeader {
            request: r.request.clone(),
            header: "Link (rel=\"next\")".into(),
        });
    };
    let url = ctx.reg.resolve(&next).map_err(|d| r.other_failure(d))?;
    let expected = format!(
        "<{}?n=2&last={}>; rel=\"next\"",
        tags_url(ctx, &[]).path(),
        full[1]
    );
    let n = query_value(&url, "n");
    let last = query_value(&url, "last");
    if url.path() != tags_url(ctx, &[]).path()
        || n.as_deref() != Some("2")
        || last.as_deref() != Some(full[1].as_str())
    {
        return Err(r.header_mismatch("Link", &expected, &next));
    }
    Ok(())
}

fn query_value(url: &Url, key: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

fn tags_next_page(ctx: &mut Ctx) -> CheckResultOf {
    ctx.listed_tags()?;
    let full = all_tags(ctx).pre("listing all tags")?;
    if full.len() < 4 {
        return Err(CheckFailure::Precondition(format!(
            "the repository lists {} tags, 4 needed",
            full.len()
        )));
    }
    let url = tags_url(ctx, &[("n", "2"), ("last", &full[1])]);
    let r = ctx.reg.send(Method::GET, url, true, |b| b)?;
    let page = tags_of(ctx, &r)?;
    if page != full[2..4] {
        return Err(r.body_failure(format!(
            "expected [{}], got [{}]",
            preview(&full[2..4]),
            preview(&page)
        )));
    }
    Ok(())
}

// ---- referrers -----------------------------------------------------------

fn oci_subject(ctx: &mut Ctx) -> CheckResultOf {
    let refs = ctx.referrers()?;
    refs.a_put
        .expect_header("OCI-Subject", &refs.subject.digest)
}

/// One referrers response (first page) and every descriptor across its
/// pages.
fn fetch_referrers(
    ctx: &Ctx,
    digest: &str,
    filter: Option<&str>,
) -> Result<(Resp, Vec<Value>), CheckFailure> {
    let query: Vec<(&str, &str)> = filter
        .map(|f| vec![("artifactType", f)])
        .unwrap_or_default();
    let mut url = ctx
        .reg
        .url(&format!("/v2/{}/referrers/{digest}", ctx.repo), &query);
    let mut first = None;
    let mut all = Vec::new();
    for _ in 0..MAX_PAGES {
        let r = ctx.reg.send(Method::GET, url, true, |b| b)?;
        r.expect_status(&[200])?;
        r.expect_media_type("Content-Type", OCI_INDEX)?;
        let v = r.json()?;
        if v.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
            return Err(r.body_failure("schemaVersion is not 2"));
        }
        if let Some(mt) = v.get("mediaType") {
            if mt.as_str() != Some(OCI_INDEX) {
                return Err(r.body_failure(format!("mediaType is {mt}, expected {OCI_INDEX}")));
            }
        }
        let Some(Value::Array(manifests)) = v.get("manifests") else {
            return Err(r.body_failure("no \"manifests\" array"));
        };
        all.extend(manifests.iter().cloned());
        let next = r.next_link()?;
        let r_next = match next {
            Some(n) => Some(ctx.reg.resolve(&n).map_err(|d| r.other_failure(d))?),
            None => None,
        };
        if first.is_none() {
            first = Some(r);
        }
        match r_next {
            Some(u) => url = u,
            None => break,
        }
    }
    let first = first.ok_or_else(|| CheckFailure::Precondition("no referrers page".into()))?;
    Ok((first, all))
}

fn entry<'a>(entries: &'a [Value], m: &Manifest) -> Option<&'a Value> {
    entries
        .iter()
        .find(|e| e.get("digest").and_then(Value::as_str) == Some(m.digest.as_str()))
}

/// The descriptor of `m` in `entries`, with the right media type and size.
fn expect_entry<'a>(
    r: &Resp,
    entries: &'a [Value],
    m: &Manifest,
    label: &str,
) -> Result<&'a Value, CheckFailure> {
    let e = entry(entries, m)
        .ok_or_else(|| r.body_failure(format!("{label} {} is not listed", m.digest)))?;
    if e.get("mediaType").and_then(Value::as_str) != Some(OCI_MANIFEST) {
        return Err(r.body_failure(format!(
            "{label}: mediaType is {}",
            e.get("mediaType").unwrap_or(&Value::Null)
        )));
    }
    if e.get("size").and_then(Value::as_u64) != Some(m.bytes.len() as u64) {
        return Err(r.body_failure(format!(
            "{label}: size is {}, expected {}",
            e.get("size").unwrap_or(&Value::Null),
            m.bytes.len()
        )));
    }
    Ok(e)
}

fn expect_artifact_type(r: &Resp, e: &Value, expected: &str, label: &str) -> CheckResultOf {
    match e.get("artifactType").and_then(Value::as_str) {
        Some(t) if t == expected => Ok(()),
        Some(t) => Err(r.body_failure(format!(
            "{label}: artifactType is {t:?}, expected {expected:?}"
        ))),
        None => Err(r.body_failure(format!("{label}: no artifactType, expected {expected:?}"))),
    }
}

fn referrers_list(ctx: &mut Ctx) -> CheckResultOf {
    let refs = ctx.referrers()?;
    let (r, entries) = fetch_referrers(ctx, &refs.subject.digest, None)?;
    let a = expect_entry(&r, &entries, &refs.a, "referrer with artifactType")?;
    expect_artifact_type(&r, a, REFERRER_A_TYPE, "referrer with artifactType")?;
    expect_entry(&r, &entries, &refs.b, "referrer without artifactType")?;
    Ok(())
}

fn referrers_config_type(ctx: &mut Ctx) -> CheckResultOf {
    let refs = ctx.referrers()?;
    let (r, entries) = fetch_referrers(ctx, &refs.subject.digest, None)?;
    let b = expect_entry(&r, &entries, &refs.b, "referrer without artifactType")?;
    expect_artifact_type(&r, b, REFERRER_B_CONFIG, "referrer without artifactType")
}

fn referrers_annotations(ctx: &mut Ctx) -> CheckResultOf {
    let refs = ctx.referrers()?;
    let (r, entries) = fetch_referrers(ctx, &refs.subject.digest, None)?;
    for (m, purpose) in [(&refs.a, "referrer-a"), (&refs.b, "referrer-b")] {
        let e = expect_entry(&r, &entries, m, purpose)?;
        let ann = e.get("annotations");
        let get = |k: &str| ann.and_then(|a| a.get(k)).and_then(Value::as_str);
        if get(ANN_RUN) != Some(ctx.run.as_str()) || get(ANN_PURPOSE) != Some(purpose) {
            return Err(r.body_failure(format!(
                "{purpose}: annotations are {}, expected {ANN_RUN}={:?} and {ANN_PURPOSE}={purpose:?}",
                ann.unwrap_or(&Value::Null),
                ctx.run
            )));
        }
    }
    Ok(())
}

fn referrers_filter(ctx: &mut Ctx) -> CheckResultOf {
    let refs = ctx.referrers()?;
    let (r, entries) = fetch_referrers(ctx, &refs.subject.digest, Some(REFERRER_A_TYPE))?;
    let applied = r.require_header("OCI-Filters-Applied")?;
    if !applied.split(',').any(|f| f.trim() == "artifactType") {
        return Err(r.header_mismatch("OCI-Filters-Applied", "artifactType", &applied));
    }
    expect_entry(&r, &entries, &refs.a, "matching referrer")?;
    if entry(&entries, &refs.b).is_some() {
        return Err(r.body_failure("the referrer of another artifactType is listed"));
    }
    if let Some(e) = entries
        .iter()
        .find(|e| e.get("artifactType").and_then(Value::as_str) != Some(REFERRER_A_TYPE))
    {
        return Err(r.body_failure(format!("entry of another artifactType listed: {e}")));
    }
    Ok(())
}

fn referrers_unknown(ctx: &mut Ctx) -> CheckResultOf {
    let digest = sha256_digest(format!("no such subject {}", ctx.run).as_bytes());
    let (r, entries) = fetch_referrers(ctx, &digest, None)?;
    if !entries.is_empty() {
        return Err(r.body_failure(format!("expected no manifests, got {}", entries.len())));
    }
    Ok(())
}

fn referrers_malformed(ctx: &mut Ctx) -> CheckResultOf {
    let path = format!("/v2/{}/referrers/sha256:not-a-hex-digest", ctx.repo);
    let r = ctx.call(Method::GET, &path, &[])?;
    r.expect_status(&[400])
}

// ---- catalog ---------------------------------------------------------------

fn catalog(ctx: &mut Ctx) -> CheckResultOf {
    ctx.image()?;
    let mut url = ctx.reg.url("/v2/_catalog", &[("n", "100")]);
    let mut seen = 0usize;
    for _ in 0..MAX_PAGES {
        let r = ctx.reg.send(Method::GET, url, true, |b| b)?;
        r.expect_status(&[200])?;
        let v = r.json()?;
        let Some(Value::Array(repos)) = v.get("repositories") else {
            return Err(r.body_failure("no \"repositories\" array"));
        };
        if repos.iter().any(|x| x.as_str() == Some(ctx.repo.as_str())) {
            return Ok(());
        }
        seen += repos.len();
        match r.next_link()? {
            Some(next) => url = ctx.reg.resolve(&next).map_err(|d| r.other_failure(d))?,
            None => {
                return Err(r.body_failure(format!(
                    "repository {} is not listed ({seen} repositories seen)",
                    ctx.repo
                )))
            }
        }
    }
    Err(CheckFailure::Other {
        request: "GET /v2/_catalog".into(),
        detail: format!("more than {MAX_PAGES} pages"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn lexical_order_accepts_bytewise_or_case_folded() {
        assert!(is_lexically_sorted(&s(&["a", "b", "c"])));
        assert!(is_lexically_sorted(&s(&["B", "a", "c"])));
        assert!(is_lexically_sorted(&s(&["a", "B", "c"])));
        assert!(is_lexically_sorted(&s(&[])));
        assert!(!is_lexically_sorted(&s(&["b", "a"])));
        assert!(!is_lexically_sorted(&s(&["1-list-b", "1-list-a"])));
    }

    #[test]
    fn preview_truncates() {
        let tags: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        assert_eq!(
            preview(&tags),
            "t0, t1, t2, t3, t4, t5, t6, t7, … (10 tags)"
        );
    }
}
