//! The API base endpoint, `GET /v2/`.

use reqwest::Method;

use crate::check::{Check, CheckResultOf, Workflow};
use crate::ctx::Ctx;

pub(crate) fn checks() -> Vec<Check> {
    vec![Check::new(
        Workflow::Base,
        "GET /v2/ answers 200 (or 401 with WWW-Authenticate)",
        api_base,
    )]
}

fn api_base(ctx: &mut Ctx) -> CheckResultOf {
    let r = ctx.call(Method::GET, "/v2/", &[])?;
    r.expect_status(&[200, 401])?;
    if r.status == 401 {
        r.require_header("WWW-Authenticate")?;
    }
    Ok(())
}
