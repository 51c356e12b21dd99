//! Pull-through cache mode (`sealvol serve --upstream URL`), as
//! distribution's proxy mode: the registry serves what an upstream
//! registry holds and keeps what it fetched, so a fleet's pulls cross the
//! long link once.
//!
//! - A blob a client asks for that is not here is fetched from the upstream
//!   once, however many clients ask at once (the others wait for that one
//!   fetch), streamed into the blob store through an upload whose sha256
//!   must be the digest asked for: a corrupt upstream blob is refused and
//!   not kept. It is then served from here.
//! - A manifest by digest is answered from here once fetched (it cannot
//!   change); a tag is resolved on the upstream again once it is older
//!   than `tag_ttl_seconds`, and the last resolution serves while the
//!   upstream is unreachable.
//! - Each fetch is one request to the upstream; authenticating to it is
//!   one handshake, reused until its token expires or a fetch is refused
//!   (`state::upstream`).
//! - Blobs stay within `cache_size`, least recently used going first.
//! - Pushes, deletes and the volume API are refused: writes go to the
//!   upstream.
//! - The referrers of a manifest (its signatures, its prefetch list) are
//!   listed as the upstream lists them, merged with those cached here, so
//!   a client that requires a signature finds it through the cache; the
//!   referrer manifests and their blobs are then fetched as any other.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::{FutureExt as _, StreamExt as _, TryStreamExt as _};
use sealvol_spec::oci::OciDescriptor;
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};

use crate::error::{Code, RegistryError, Result};
use crate::state::app::App;
use crate::state::upstream::{Fetch, Pin, Upstream};
use crate::store::{AppendError, BodyError};

/// The answer to a write on a pull-through cache.
pub(crate) fn refuse_write(up: &Upstream) -> RegistryError {
    RegistryError::with_status(
        Code::Unsupported,
        ::http::StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "this registry is a pull-through cache of {}; push and delete there",
            up.url
        ),
    )
}

/// Makes manifest `reference` of `name` present here: a digest fetched
/// once, a tag resolved again when its last resolution is older than the
/// TTL (kept when the upstream cannot be reached). The manifest it
/// resolves to stays pinned while the answer holds the [`Pin`].
pub(crate) async fn manifest<'a>(
    app: &App,
    up: &'a Upstream,
    name: &str,
    reference: &str,
) -> Result<Pin<'a>> {
    let now = app.now();
    if reference.contains(':') {
        let digest = crate::service::manifests::parse_digest(reference)?;
        let pin = up.pin(digest);
        if !have_manifest(app, name, &digest).await? {
            fetch_manifest(app, up, name, reference, Some(digest)).await?;
        }
        return Ok(pin);
    }
    crate::service::manifests::check_tag(reference)?;
    let key = (name.to_string(), reference.to_string());
    let fresh = (up.resolved.lock().expect("resolved lock"))
        .get(&key)
        .is_some_and(|at| now < at.saturating_add(up.tag_ttl));
    if fresh {
        if let Some(pin) = cached_tag(app, up, name, reference).await? {
            return Ok(pin);
        }
    }
    match fetch_manifest(app, up, name, reference, None).await {
        Ok(pin) => {
            up.resolved.lock().expect("resolved lock").insert(key, now);
            Ok(pin)
        }
        // Unreachable or failing: what this cache resolved last serves.
        Err(e @ RegistryError::Upstream(_)) => match cached_tag(app, up, name, reference).await? {
            Some(pin) => {
                tracing::warn!(upstream = %up.url, repo = name, tag = reference, error = %e, "serving a cached tag");
                Ok(pin)
            }
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// The manifest tag `tag` of `name` resolves to here, pinned, when it is
/// stored.
async fn cached_tag<'a>(
    app: &App,
    up: &'a Upstream,
    name: &str,
    tag: &str,
) -> Result<Option<Pin<'a>>> {
    let (repo, t) = (name.to_string(), tag.to_string());
    let Some(d) = app.meta(move |m| m.resolve_tag(&repo, &t)).await? else {
        return Ok(None);
    };
    let digest = crate::service::manifests::parse_digest(&d)?;
    let pin = up.pin(digest);
    Ok(have_manifest(app, name, &digest).await?.then_some(pin))
}

async fn have_manifest(app: &App, name: &str, digest: &Sha256Digest) -> Result<bool> {
    let (repo, d) = (name.to_string(), digest.to_string());
    let recorded = app.meta(move |m| m.manifest(&repo, &d)).await?.is_some();
    Ok(recorded && app.blobs.size(digest).await?.is_some())
}

/// Fetches a manifest from the upstream and records it here, under the tag
/// when `reference` is one. Its blobs are fetched when asked for.
async fn fetch_manifest<'a>(
    app: &App,
    up: &'a Upstream,
    name: &str,
    reference: &str,
    want: Option<Sha256Digest>,
) -> Result<Pin<'a>> {
    let what = format!("manifest {name}:{reference}");
    let bytes = up
        .manifest(name, reference, crate::service::manifests::MAX_MANIFEST)
        .await
        .map_err(|e| up.failed(&what, e, Code::ManifestUnknown))?;
    if bytes.len() > crate::service::manifests::MAX_MANIFEST {
        return Err(bad_upstream(up, &format!("{what} is over 4 MiB")));
    }
    let digest = Sha256Digest(Sha256::digest(&bytes).into());
    if want.is_some_and(|w| w != digest) {
        return Err(bad_upstream(
            up,
            &format!("{what}: the bytes hash to {digest}"),
        ));
    }
    let parsed = crate::service::manifests::parse_manifest(&bytes, None)
        .map_err(|e| bad_upstream(up, &format!("{what}: {e}")))?;
    up.stats.manifests_fetched.fetch_add(1, Ordering::Relaxed);
    // A referrer is listed as one here too, so that the referrers this
    // cache holds still list while the upstream is away.
    let subject = parsed.subject.map(|s| s.to_string());
    let record = crate::store::meta::ManifestRecord {
        subject: crate::service::manifests::referrer_descriptor(&parsed, &digest, bytes.len()),
        media_type: parsed.media_type,
        size: bytes.len() as u64,
        stored_at: app.now(),
    };
    let pin = up.pin(digest);
    let _sweep = app.sweep.read().await;
    let mark = crate::service::links::sweep_mark(app).await?;
    app.blobs.put(&digest, bytes.clone()).await?;
    let (repo, d, now) = (name.to_string(), digest.to_string(), app.now());
    let tag = (!reference.contains(':')).then(|| reference.to_string());
    // A cache records what the upstream accepted: its blobs arrive later,
    // so nothing is required to be here first.
    app.meta(move |m| {
        m.put_manifest(
            &repo,
            &d,
            &record,
            &crate::store::meta::References::default(),
            tag.as_deref(),
            subject.as_deref(),
            None,
            now,
        )
    })
    .await?
    .map_err(|what| RegistryError::internal(format!("caching a manifest needed {what}")))?;
    // Recorded: not held while waiting out another replica's sweep.
    drop(_sweep);
    if !crate::service::links::settle(app, mark, &[digest])
        .await?
        .is_empty()
    {
        app.blobs.put(&digest, bytes).await?;
    }
    Ok(pin)
}

fn bad_upstream(up: &Upstream, what: &str) -> RegistryError {
    RegistryError::Upstream(format!(
        "upstream {} sent a bad answer: {what}; nothing was kept",
        up.url
    ))
}

/// Makes blob `digest` of `name` present here, fetching it from the
/// upstream once however many requests wait for it; pinned while the
/// answer holds the [`Pin`].
pub(crate) async fn blob<'a>(
    app: &Arc<App>,
    up: &'a Arc<Upstream>,
    name: &str,
    digest: &Sha256Digest,
) -> Result<Pin<'a>> {
    let pin = up.pin(*digest);
    let (repo, d) = (name.to_string(), digest.to_string());
    let linked = app.meta(move |m| m.blob_size(&repo, &d)).await?.is_some();
    if linked && app.blobs.size(digest).await?.is_some() {
        return Ok(pin);
    }
    let fetch = {
        let mut fetching = up.fetching.lock().expect("fetching lock");
        match fetching.get(digest) {
            Some(f) => f.clone(),
            None => {
                // Its own task: a client that hangs up does not cancel the
                // fetch the others wait for.
                let (app, up2, name, digest2) =
                    (Arc::clone(app), Arc::clone(up), name.to_string(), *digest);
                let task = tokio::spawn(async move {
                    let r = fetch_blob(&app, &up2, &name, &digest2).await;
                    up2.fetching.lock().expect("fetching lock").remove(&digest2);
                    r
                });
                let f: Fetch = async move {
                    task.await
                        .unwrap_or_else(|e| Err(RegistryError::internal(e)))
                }
                .boxed()
                .shared();
                fetching.insert(*digest, f.clone());
                f
            }
        }
    };
    fetch.await?;
    // A waiter of another repository links it too.
    let (repo, d, now) = (name.to_string(), digest.to_string(), app.now());
    if let Some(size) = app.blobs.size(digest).await? {
        app.meta(move |m| m.link_blob(&repo, &d, size, now)).await?;
    }
    Ok(pin)
}

async fn fetch_blob(app: &App, up: &Upstream, name: &str, digest: &Sha256Digest) -> Result<()> {
    let what = format!("blob {digest} of {name}");
    let sized = up
        .blob(name, digest)
        .await
        .map_err(|e| up.failed(&what, e, Code::BlobUnknown))?;
    if let (Some(len), Some(max)) = (sized.len, up.cache_size) {
        if len > max {
            return Err(bad_upstream(
                up,
                &format!("{what} is {len} bytes, more than cache_size {max}"),
            ));
        }
    }
    // Into an upload of the blob store, hashed as it streams; a body
    // longer than announced is cut off and fails the hash.
    let limit = sized.len.unwrap_or(u64::MAX);
    let mut seen = 0u64;
    let body = sized
        .stream
        .map_err(|e| BodyError(e.to_string()))
        .take_while(move |piece| {
            if let Ok(p) = piece {
                seen += p.len() as u64;
            }
            std::future::ready(seen <= limit.saturating_add(1))
        })
        .boxed();
    let id = uuid::Uuid::new_v4().to_string();
    app.blobs.create_upload(&id).await?;
    let result = async {
        let appended = app
            .blobs
            .append_upload(&id, 0, body, Some(Sha256::new()))
            .await;
        match appended.result {
            Ok(()) => {}
            // The stream checks the digest too, so bad bytes may end it.
            Err(AppendError::Body(BodyError(e))) => {
                return Err(RegistryError::Upstream(format!(
                    "upstream {} sent a bad answer: {what}: {e}; nothing was kept",
                    up.url
                )))
            }
            Err(AppendError::Store(e)) => return Err(e.into()),
        }
        let got = match appended.hasher {
            Some(h) => Sha256Digest(h.finalize().into()),
            None => app.blobs.hash_upload(&id).await?,
        };
        if got != *digest {
            return Err(bad_upstream(
                up,
                &format!("{what}: the bytes hash to {got}"),
            ));
        }
        let _sweep = app.sweep.read().await;
        app.blobs.commit_upload(&id, digest).await?;
        let (repo, d, size, now) = (
            name.to_string(),
            digest.to_string(),
            appended.size,
            app.now(),
        );
        app.meta(move |m| m.link_blob(&repo, &d, size, now)).await?;
        up.stats.blobs_fetched.fetch_add(1, Ordering::Relaxed);
        up.stats.bytes_fetched.fetch_add(size, Ordering::Relaxed);
        metrics::counter!("sealvol_upstream_blobs_fetched_total").increment(1);
        metrics::counter!("sealvol_upstream_bytes_fetched_total").increment(size);
        Ok(size)
    }
    .await;
    if result.is_err() {
        let _ = app.blobs.remove_upload(&id).await;
    }
    result?;
    evict(app, up).await
}

/// Deletes the least recently used blobs while the cache holds more than
/// `cache_size`, down to nine tenths of it, sparing the pinned ones (about
/// to be served). Deleted blobs stay linked: the next request for one
/// fetches it again.
async fn evict(app: &App, up: &Upstream) -> Result<()> {
    let Some(max) = up.cache_size else {
        return Ok(());
    };
    let _one = up.evicting.lock().await;
    let mut stored = app.blobs.list().await?;
    let mut total: u64 = stored.iter().map(|b| b.size).sum();
    if total <= max {
        return Ok(());
    }
    {
        let used = up.used.lock().expect("used lock");
        stored.sort_by_key(|b| used.get(&b.digest).copied().unwrap_or(b.modified));
    }
    let target = max / 10 * 9;
    let _sweep = app.sweep.write().await;
    for b in stored {
        if total <= target {
            break;
        }
        if up
            .pinned
            .lock()
            .expect("pinned lock")
            .contains_key(&b.digest)
        {
            continue;
        }
        app.blobs.delete(&b.digest).await?;
        up.used.lock().expect("used lock").remove(&b.digest);
        total -= b.size;
    }
    // Pinned blobs kept it over: the requests serving them settle it.
    up.over.store(total > max, Ordering::Relaxed);
    Ok(())
}

/// After a request let go of its pin: evicts what pins kept over
/// `cache_size`.
pub(crate) async fn settle(app: &App, up: &Upstream) {
    if up.over.load(Ordering::Relaxed) {
        if let Err(e) = evict(app, up).await {
            tracing::warn!(error = %e, "could not evict cached blobs");
        }
    }
}

/// Tags of `name` as the upstream lists them; what this cache knows when
/// the upstream cannot be reached.
pub(crate) async fn tags(up: &Upstream, name: &str) -> Option<Vec<String>> {
    match up.tags(name).await {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(upstream = %up.url, repo = name, error = %e, "listing tags upstream failed; answering from the cache");
            None
        }
    }
}

/// The referrers of `subject` in `name`, those of `artifact_type` when one
/// is given: as the upstream lists them (through its referrers API, or its
/// referrers tag schema where it has no API), with those this cache holds
/// added, once each. What this cache holds alone when the upstream cannot
/// be reached or answers badly.
pub(crate) async fn referrers(
    app: &App,
    up: &Upstream,
    name: &str,
    subject: &Sha256Digest,
    artifact_type: Option<&str>,
) -> Result<Vec<OciDescriptor>> {
    let here = crate::service::manifests::referrers(app, name, subject, artifact_type).await?;
    let there = match up.referrers(name, subject, artifact_type).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(upstream = %up.url, repo = name, subject = %subject, error = %e, "listing referrers upstream failed; answering from the cache");
            return Ok(here);
        }
    };
    Ok(merge(there, here))
}

/// `first`, then the entries of `then` whose digest `first` lacks.
fn merge(first: Vec<OciDescriptor>, then: Vec<OciDescriptor>) -> Vec<OciDescriptor> {
    let mut seen: std::collections::HashSet<String> =
        first.iter().map(|d| d.digest().to_string()).collect();
    let mut all = first;
    all.extend(
        then.into_iter()
            .filter(|d| seen.insert(d.digest().to_string())),
    );
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8, size: u64) -> OciDescriptor {
        serde_json::from_value(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": Sha256Digest([n; 32]).to_string(),
            "size": size,
        }))
        .unwrap()
    }

    #[test]
    fn the_upstreams_referrers_come_first_and_each_digest_once() {
        let merged = merge(vec![d(1, 10), d(2, 20)], vec![d(2, 99), d(3, 30)]);
        let got: Vec<(String, u64)> = merged
            .iter()
            .map(|d| (d.digest().to_string(), d.size()))
            .collect();
        assert_eq!(
            got,
            [
                (Sha256Digest([1; 32]).to_string(), 10),
                (Sha256Digest([2; 32]).to_string(), 20),
                (Sha256Digest([3; 32]).to_string(), 30),
            ]
        );
    }
}
