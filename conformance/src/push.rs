//! Push workflow: blob uploads (single POST, POST then PUT, chunked,
//! mount), upload sessions (status, cancel), and manifest pushes,
//! including the errors a registry must give for bad input.

use reqwest::header::CONTENT_TYPE;
use reqwest::Method;

use crate::check::{Check, CheckResultOf, Workflow};
use crate::content::{
    image_index, image_manifest, padded_manifest, sha256_digest, Blob, Manifest, ManifestExtras,
    OCI_MANIFEST, OCTET_STREAM,
};
use crate::ctx::Ctx;
use crate::failure::{CheckFailure, Pre};
use crate::http::Resp;

/// Size the spec says registries should accept ("at least 4 megabytes");
/// the accepted manifest stays ~100 KiB under 4 MiB.
const MIB: usize = 1 << 20;
const ACCEPTED_MANIFEST_SIZE: usize = 4 * MIB - 100 * 1024;
/// Just over 4 MiB: must be refused with 413.
const OVERSIZED_MANIFEST_SIZE: usize = 4 * MIB + 1024;

pub(crate) fn checks() -> Vec<Check> {
    use Workflow::Push;
    vec![
        Check::new(Push, "monolithic upload, single POST ?digest=", single_post),
        Check::new(
            Push,
            "monolithic upload, POST then PUT ?digest=",
            post_then_put,
        ),
        Check::new(
            Push,
            "chunked upload, PATCH chunks then PUT ?digest=",
            chunked,
        ),
        Check::new(
            Push,
            "out-of-order PATCH chunk is refused with 416",
            out_of_order_chunk,
        ),
        Check::new(
            Push,
            "upload status GET answers 204 with Range",
            upload_status,
        ),
        Check::new(
            Push,
            "upload cancel DELETE answers 204, then the session is unknown",
            cancel_upload,
        ),
        Check::new(
            Push,
            "PUT with a wrong digest is refused (400 DIGEST_INVALID)",
            wrong_digest,
        ),
        Check::new(
            Push,
            "PUT with a malformed digest is refused (400 DIGEST_INVALID)",
            malformed_digest,
        ),
        Check::new(Push, "cross-repository mount answers 201", mount),
        Check::new(
            Push,
            "mount from a repository lacking the blob falls back to 202",
            mount_fallback,
        ),
        Check::new(Push, "image manifest PUT by tag", image_by_tag),
        Check::new(Push, "image manifest PUT by digest", image_by_digest),
        Check::new(Push, "image index PUT by tag", index_by_tag),
        Check::new(Push, "image index PUT by digest", index_by_digest),
        Check::new(
            Push,
            "manifest referencing a missing blob (400 MANIFEST_BLOB_UNKNOWN)",
            missing_blob,
        ),
        Check::new(
            Push,
            "invalid manifest body (400 MANIFEST_INVALID)",
            invalid_manifest,
        ),
        Check::new(Push, "manifest of ~3.9 MiB is accepted", large_manifest),
        Check::new(
            Push,
            "manifest over 4 MiB is refused with 413",
            oversized_manifest,
        ),
        Check::new(
            Push,
            "invalid repository name (400 NAME_INVALID)",
            invalid_name,
        ),
    ]
}

/// A blob upload finished: 201 with `Location`.
fn expect_blob_created(r: &Resp) -> CheckResultOf {
    r.expect_status(&[201])?;
    r.require_header("Location")?;
    Ok(())
}

/// The blob is readable in `repo` with exactly `blob`'s bytes.
fn expect_blob_readable(ctx: &Ctx, repo: &str, blob: &Blob) -> CheckResultOf {
    let r = ctx.fetch_blob(Method::GET, repo, &blob.digest, None)?;
    r.expect_status(&[200])?;
    r.expect_body(&blob.bytes)
}

fn single_post(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("single-post", 512);
    let url = ctx.reg.url(
        &format!("/v2/{}/blobs/uploads/", ctx.repo),
        &[("digest", &blob.digest)],
    );
    let body = blob.bytes.clone();
    let r = ctx.reg.send(Method::POST, url, false, |b| {
        b.header(CONTENT_TYPE, OCTET_STREAM).body(body)
    })?;
    if r.status == 202 {
        ctx.abandon_session_of(&r);
        return Err(r.other_failure(
            "expected status 201, got 202: the registry opened an upload session instead \
             of storing the blob (the spec allows this fallback; this runner requires \
             single-POST uploads)",
        ));
    }
    expect_blob_created(&r)?;
    expect_blob_readable(ctx, &ctx.repo, &blob)
}

fn post_then_put(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("post-put", 512);
    let loc = ctx.start_upload(&ctx.repo)?;
    let r = ctx.finish_upload(&loc, &blob.digest, &blob.bytes)?;
    expect_blob_created(&r)?;
    expect_blob_readable(ctx, &ctx.repo, &blob)
}

fn chunked(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("chunked", 1000);
    let (first, second) = blob.bytes.split_at(600);
    let loc = ctx.start_upload(&ctx.repo)?;

    let r = ctx.patch_chunk(&loc, 0, first)?;
    r.expect_status(&[202])?;
    r.expect_header("Range", "0-599")?;
    let loc = ctx.location(&r)?;

    let r = ctx.patch_chunk(&loc, 600, second)?;
    r.expect_status(&[202])?;
    r.expect_header("Range", "0-999")?;
    let loc = ctx.location(&r)?;

    let r = ctx.finish_upload(&loc, &blob.digest, &[])?;
    expect_blob_created(&r)?;
    expect_blob_readable(ctx, &ctx.repo, &blob)
}

fn out_of_order_chunk(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("out-of-order", 30);
    let loc = ctx.start_upload(&ctx.repo).pre("starting an upload")?;
    let r = ctx
        .patch_chunk(&loc, 0, &blob.bytes[..10])
        .pre("first chunk")?;
    r.expect_status(&[202]).pre("first chunk")?;
    let loc = ctx.location(&r).pre("first chunk")?;
    // Skips bytes 10..20: the chunk does not start where the last ended.
    let r = ctx.patch_chunk(&loc, 20, &blob.bytes[20..])?;
    ctx.abandon_upload(&loc);
    r.expect_status(&[416])
}

fn upload_status(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("status", 10);
    let loc = ctx.start_upload(&ctx.repo).pre("starting an upload")?;
    let r = ctx
        .patch_chunk(&loc, 0, &blob.bytes)
        .pre("uploading a chunk")?;
    r.expect_status(&[202]).pre("uploading a chunk")?;
    let loc = ctx.location(&r).pre("uploading a chunk")?;
    let r = ctx.reg.send(Method::GET, loc.clone(), false, |b| b)?;
    ctx.abandon_upload(&loc);
    r.expect_status(&[204])?;
    r.expect_header("Range", "0-9")?;
    r.require_header("Location")?;
    Ok(())
}

fn cancel_upload(ctx: &mut Ctx) -> CheckResultOf {
    let loc = ctx.start_upload(&ctx.repo).pre("starting an upload")?;
    let r = ctx.reg.send(Method::DELETE, loc.clone(), false, |b| b)?;
    r.expect_status(&[204])?;
    let r = ctx.reg.send(Method::GET, loc, false, |b| b)?;
    r.expect_error(404, "BLOB_UPLOAD_UNKNOWN")
}

fn wrong_digest(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("wrong-digest", 100);
    let other = sha256_digest(b"some other content");
    let loc = ctx.start_upload(&ctx.repo).pre("starting an upload")?;
    let r = ctx.finish_upload(&loc, &other, &blob.bytes)?;
    ctx.abandon_upload(&loc);
    r.expect_error(400, "DIGEST_INVALID")
}

fn malformed_digest(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("malformed-digest", 100);
    let loc = ctx.start_upload(&ctx.repo).pre("starting an upload")?;
    let r = ctx.finish_upload(&loc, "sha256:not-a-hex-digest", &blob.bytes)?;
    ctx.abandon_upload(&loc);
    r.expect_error(400, "DIGEST_INVALID")
}

fn mount(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("mount", 300);
    ctx.push_blob(&ctx.repo, &blob)
        .pre("pushing the blob to mount")?;
    let r = ctx.post_upload(&ctx.other, &[("mount", &blob.digest), ("from", &ctx.repo)])?;
    if r.status == 202 {
        ctx.abandon_session_of(&r);
    }
    expect_blob_created(&r)?;
    let h = ctx.fetch_blob(Method::HEAD, &ctx.other, &blob.digest, None)?;
    h.expect_status(&[200])
}

fn mount_fallback(ctx: &mut Ctx) -> CheckResultOf {
    // Never pushed anywhere: no registry can mount it.
    let blob = ctx.blob("mount-missing", 300);
    let r = ctx.post_upload(&ctx.other, &[("mount", &blob.digest), ("from", &ctx.repo)])?;
    r.expect_status(&[202])?;
    let loc = ctx.location(&r)?;
    ctx.abandon_upload(&loc);
    Ok(())
}

/// A manifest push succeeded: 201, `Location`, `Docker-Content-Digest`
/// equal to the digest of the bytes sent.
fn expect_manifest_created(r: &Resp, m: &Manifest) -> CheckResultOf {
    r.expect_status(&[201])?;
    r.require_header("Location")?;
    r.expect_header("Docker-Content-Digest", &m.digest)
}

fn image_by_tag(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let r = ctx.put_manifest(&ctx.repo, &img.tag, &img.manifest)?;
    expect_manifest_created(&r, &img.manifest)
}

fn image_by_digest(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let m = ctx.image_variant(&img, "by-digest");
    let r = ctx.put_manifest(&ctx.repo, &m.digest, &m)?;
    expect_manifest_created(&r, &m)
}

fn index_by_tag(ctx: &mut Ctx) -> CheckResultOf {
    let idx = ctx.index()?;
    let r = ctx.put_manifest(&ctx.repo, &idx.tag, &idx.manifest)?;
    expect_manifest_created(&r, &idx.manifest)
}

fn index_by_digest(ctx: &mut Ctx) -> CheckResultOf {
    let members = ctx.index_members()?;
    let m = image_index(members, ctx.annotations("index-by-digest"));
    let r = ctx.put_manifest(&ctx.repo, &m.digest, &m)?;
    expect_manifest_created(&r, &m)
}

fn missing_blob(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let absent = ctx.blob("never-pushed-layer", 100);
    let m = image_manifest(
        img.config.descriptor(),
        vec![absent.descriptor()],
        ManifestExtras {
            annotations: ctx.annotations("missing-blob"),
            ..Default::default()
        },
    );
    let r = ctx.put_manifest(&ctx.repo, &ctx.tag("missing-blob"), &m)?;
    r.expect_error(400, "MANIFEST_BLOB_UNKNOWN")
}

fn invalid_manifest(ctx: &mut Ctx) -> CheckResultOf {
    let m = Manifest {
        media_type: OCI_MANIFEST.to_string(),
        bytes: format!("this is not a manifest {}", ctx.run).into_bytes(),
        digest: String::new(),
    };
    let r = ctx.put_manifest(&ctx.repo, &ctx.tag("invalid"), &m)?;
    r.expect_error(400, "MANIFEST_INVALID")
}

fn sized_manifest(ctx: &mut Ctx, size: usize) -> Result<Manifest, CheckFailure> {
    let img = ctx.image()?;
    padded_manifest(
        &img.config.descriptor(),
        &[img.layer.descriptor()],
        &format!("{}-{size}", ctx.run),
        size,
    )
    .ok_or_else(|| CheckFailure::Precondition(format!("cannot build a {size}-byte manifest")))
}

fn large_manifest(ctx: &mut Ctx) -> CheckResultOf {
    let m = sized_manifest(ctx, ACCEPTED_MANIFEST_SIZE)?;
    let r = ctx.put_manifest(&ctx.repo, &ctx.tag("large"), &m)?;
    expect_manifest_created(&r, &m)
}

fn oversized_manifest(ctx: &mut Ctx) -> CheckResultOf {
    let m = sized_manifest(ctx, OVERSIZED_MANIFEST_SIZE)?;
    let r = ctx.put_manifest(&ctx.repo, &ctx.tag("oversized"), &m)?;
    r.expect_status(&[413])
}

fn invalid_name(ctx: &mut Ctx) -> CheckResultOf {
    let repo = format!("{}/Invalid-UPPER", ctx.repo);
    let r = ctx.post_upload(&repo, &[])?;
    ctx.abandon_session_of(&r);
    r.expect_error(400, "NAME_INVALID")
}
