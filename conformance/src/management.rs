//! Content management workflow: deleting a tag, a manifest and a blob,
//! each on content pushed for that check alone.

use reqwest::Method;

use crate::check::{Check, CheckResultOf, Workflow};
use crate::ctx::Ctx;
use crate::failure::Pre;

pub(crate) fn checks() -> Vec<Check> {
    use Workflow::Management;
    vec![
        Check::new(
            Management,
            "DELETE tag answers 202; the tag is gone, the digest still resolves",
            delete_tag,
        ),
        Check::new(
            Management,
            "DELETE manifest by digest answers 202; digest and tag are gone",
            delete_manifest,
        ),
        Check::new(
            Management,
            "DELETE blob answers 202; the blob is gone",
            delete_blob,
        ),
    ]
}

fn delete_tag(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let m = ctx.image_variant(&img, "delete-tag");
    let tag = ctx.tag("delete-tag");
    ctx.push_manifest(&ctx.repo, &tag, &m)
        .pre("pushing a manifest to untag")?;
    let r = ctx.call(
        Method::DELETE,
        &format!("/v2/{}/manifests/{tag}", ctx.repo),
        &[],
    )?;
    r.expect_status(&[202])?;
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &tag)?;
    r.expect_status(&[404])?;
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &m.digest)?;
    r.expect_status(&[200])?;
    r.expect_body(&m.bytes)
}

fn delete_manifest(ctx: &mut Ctx) -> CheckResultOf {
    let img = ctx.image()?;
    let m = ctx.image_variant(&img, "delete-manifest");
    let tag = ctx.tag("delete-manifest");
    ctx.push_manifest(&ctx.repo, &tag, &m)
        .pre("pushing a manifest to delete")?;
    let r = ctx.call(
        Method::DELETE,
        &format!("/v2/{}/manifests/{}", ctx.repo, m.digest),
        &[],
    )?;
    r.expect_status(&[202])?;
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &m.digest)?;
    r.expect_status(&[404])?;
    let r = ctx.fetch_manifest(Method::GET, &ctx.repo, &tag)?;
    r.expect_status(&[404])
}

fn delete_blob(ctx: &mut Ctx) -> CheckResultOf {
    let blob = ctx.blob("delete-blob", 200);
    ctx.push_blob(&ctx.repo, &blob)
        .pre("pushing a blob to delete")?;
    let r = ctx.call(
        Method::DELETE,
        &format!("/v2/{}/blobs/{}", ctx.repo, blob.digest),
        &[],
    )?;
    r.expect_status(&[202])?;
    let r = ctx.fetch_blob(Method::GET, &ctx.repo, &blob.digest, None)?;
    r.expect_status(&[404])
}
