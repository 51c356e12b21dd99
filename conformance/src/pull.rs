//! Pull workflow: manifests and blobs by tag and digest (`GET` and
//! `HEAD`), byte ranges, and the 404s for content that is not there.

use reqwest::Method;

use crate::check::{Check, CheckResultOf, Workflow};
use crate::content::{sha256_digest, Manifest};
use crate::ctx::Ctx;
use crate::failure::Pre;
use crate::http::Resp;

pub(crate) fn checks() -> Vec<Check> {
    use Workflow::Pull;
    vec![
        Check::new(Pull, "GET manifest by tag", get_manifest_by_tag),
        Check::new(Pull, "HEAD manifest by tag", head_manifest_by_tag),
        Check::new(Pull, "GET manifest by digest", get_manifest_by_digest),
        Check::new(Pull, "HEAD manifest by digest", head_manifest_by_digest),
        Check::new(Pull, "GET image index by tag", get_index_by_tag),
        Check::new(Pull, "GET blob", get_blob),
        Check::new(Pull, "HEAD blob", head_blob),
        Check::new(Pull, "blob Range bytes=0-9 answers 206", range_first_ten),
        Check::new(Pull, "blob Range bytes=10- answers 206", range_open_ended),
        Check::new(Pull, "blob Range bytes=-5 answers 206", range_suffix),
        Check::new(Pull, "blob Range past the end answers 416", range_past_end),
        Check::new(
            Pull,
            "unknown manifest tag (404 MANIFEST_UNKNOWN)",
            unknown_manifest_tag,
        ),
        Check::new(
            Pull,
            "unknown manifest digest (404 MANIFEST_UNKNOWN)",
            unknown_manifest_digest,
        ),
        Check::new(Pull, "unknown blob (404 BLOB_UNKNOWN)", unknown_blob),
        Check::new(
            Pull,
            "blob pushed only to another repository is not visible (404)",
            foreign_blob,
        ),
        Check::new(
            Pull,
            "blob GET with a malformed digest answers 400 or 404, not 5xx",
            malformed_blob_digest,
        ),
    ]
}

/// Headers (and, for `GET`, the body) of a manifest response.
fn expect_manifest(r: &Resp, m: &Manifest, method: &Method) -> CheckResultOf {
    r.expect_status(&[200])?;
    r.expect_media_type("Content-Type", &m.media_type)?;
    r.expect_header("Docker-Content-Digest", &m.digest)?;
    if *method == Method::GET {
        r.expect_body(&m.bytes)
    } else if r.header("Content-Length").is_some() {
        r.expect_content_length(m.bytes.len())
    } else {
        Ok(())
    }
}

fn manifest_check(ctx: &mut Ctx, method: Method, by_digest: bool) -> CheckResultOf {
    let img = ctx.image()?;
    let reference = if by_digest {
        &img.manifest.digest
    } else {
        &img.tag
    };
    let r = ctx.fetch_manifest(method.clone(), &ctx.repo, reference)?;
    expect_manifest(&r, &img.manifest, &method)
}

fn get_manifest_by_tag(ctx: &mut Ctx) -> CheckResultOf {
    manifest_check(ctx, Method::GET, false)
}

fn head_manifest_by_tag(ctx: &mut Ctx) -> CheckResultOf {
    manifest_check(ctx, Method::HEAD, false)
}

fn get_manifest_by_digest(ctx: &mut Ctx) -> CheckResultOf {
    manifest_check(ctx, Method::GET, true)
}

fn head_manifest_by_digest(ctx: &mut Ctx) -> CheckResultOf {
    manifest_check(ctx, Method::HEAD, true)
}

fn get_index_by_tag(ctx: &mut Ctx) -> CheckResultOf {
    let idx = ctx.index()?;
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &idx.tag)?;
    expect_manifest(&r, &idx.manifest, &Method::GET)
}

fn get_blob(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, &img.layer.digest, None)?;
    r.expect_status(&[200])?;
    r.expect_header("Docker-Content-Digest", &img.layer.digest)?;
    r.expect_content_length(img.layer.bytes.len())?;
    r.expect_body(&img.layer.bytes)?;
    let got = sha256_digest(&r.body);
    if got != img.layer.digest {
        return Err(r.body_failure(format!("digest of the body is {got}")));
    }
    Ok(())
}

fn head_blob(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let r = ctx.fetch_blob(Method::HEAD, &ctx.repo, &img.layer.digest, None)?;
    r.expect_status(&[200])?;
    r.expect_header("Docker-Content-Digest", &img.layer.digest)?;
    r.expect_content_length(img.layer.bytes.len())
}

/// A ranged `GET` of the layer must answer 206 with `Content-Range:
/// bytes <first>-<last>/<size>` and exactly those bytes.
fn range_check(ctx: &mut Ctx, range: &str, first: usize, last: usize) -> CheckResultOf {
    let img = ctx.image()?;
    let size = img.layer.bytes.len();
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, &img.layer.digest, Some(range))?;
    r.expect_status(&[206])?;
    r.expect_header("Content-Range", &format!("bytes {first}-{last}/{size}"))?;
    r.expect_body(&img.layer.bytes[first..=last])
}

fn range_first_ten(ctx: &mut Ctx) -> CheckResultOf {
    range_check(ctx, "bytes=0-9", 0, 9)
}

fn range_open_ended(ctx: &mut Ctx) -> CheckResultOf {
    let size = ctx.image()?.layer.bytes.len();
    range_check(ctx, "bytes=10-", 10, size - 1)
}

fn range_suffix(ctx: &mut Ctx) -> CheckResultOf {
    let size = ctx.image()?.layer.bytes.len();
    range_check(ctx, "bytes=-5", size - 5, size - 1)
}

fn range_past_end(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let size = img.layer.bytes.len();
    let range = format!("bytes={}-{}", size + 100, size + 200);
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, &img.layer.digest, Some(&range))?;
    r.expect_status(&[416])
}

fn unknown_manifest_tag(ctx: &mut Ctx) -> CheckResultOf {
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &ctx.tag("never-pushed"))?;
    r.expect_error(404, "MANIFEST_UNKNOWN")
}

fn unknown_manifest_digest(ctx: &mut Ctx) -> CheckResultOf {
    let digest = sha256_digest(format!("no such manifest {}", ctx.run).as_bytes());
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &digest)?;
    r.expect_error(404, "MANIFEST_UNKNOWN")
}

fn unknown_blob(ctx: &mut Ctx) -> CheckResultOf {
    let digest = sha256_digest(format!("no such blob {}", ctx.run).as_bytes());
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, &digest, None)?;
    r.expect_error(404, "BLOB_UNKNOWN")
}

fn foreign_blob(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("only-in-other", 200);
    ctx.push_blob(&ctx.other, &blob)
        .pre("pushing a blob to the other repository")?;
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, &blob.digest, None)?;
    r.expect_status(&[404])
}

fn malformed_blob_digest(ctx: &mut Ctx) -> CheckResultOf {
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, "sha256:not-a-hex-digest", None)?;
    r.expect_status(&[400, 404])?;
    if r.status == 400 && !r.error_codes().is_empty() {
        return r.expect_error(400, "DIGEST_INVALID");
    }
    Ok(())
}
