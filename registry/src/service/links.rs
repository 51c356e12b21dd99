//! The blob links a request relies on: a `HEAD` that renews a link's time
//! (`check_blob`, batched), and the sweep mark a request reads before it
//! relies on blob bytes and settles after it recorded its link or
//! manifest (`sweep_mark`, `settle`). The protocol is described in
//! `store::meta::sweeps`, which keeps the sequence and the GC lease.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use sealvol_spec::Sha256Digest;

use crate::error::{RegistryError, Result};
use crate::state::app::App;
use crate::store::meta::sweeps::SinceMark;
pub use crate::store::meta::sweeps::SweepMark;

/// A client checks blob `digest` of `repo` with `HEAD`: its size if
/// the repository links it. A push that finds a blob this way skips
/// uploading it and references it later, so the check renews the
/// link's time, in the metadata store where garbage collection on any
/// replica sees it, before it is answered. Only a link older than a
/// tenth of the grace period is renewed (so a check keeps a link at
/// least nine tenths of it), and the renewals of concurrent checks
/// share one transaction: a push of a new version checks every chunk
/// of the last one.
pub(crate) async fn check_blob(app: &App, repo: &str, digest: &str) -> Result<Option<u64>> {
    let (k, now) = (crate::store::meta::key(&[repo, digest]), app.now());
    let k2 = k.clone();
    let Some((size, linked_at)) = app.meta(move |m| m.link(&k2)).await? else {
        return Ok(None);
    };
    if linked_at >= now.saturating_sub(app.lifetimes.gc_grace_seconds / 10) {
        return Ok(Some(size));
    }
    let (tell, told) = tokio::sync::oneshot::channel();
    app.checks.lock().expect("checks lock").push((k, tell));
    {
        // Whoever holds the writer writes every check waiting then,
        // ours included unless an earlier writer took it.
        let _writer = app.checks_writer.lock().await;
        let batch = std::mem::take(&mut *app.checks.lock().expect("checks lock"));
        if !batch.is_empty() {
            let keys: Vec<String> = batch.iter().map(|(k, _)| k.clone()).collect();
            let now = app.now();
            let linked = app.meta(move |m| m.renew_links(&keys, now)).await?;
            for ((_, tell), linked) in batch.into_iter().zip(linked) {
                let _ = tell.send(linked);
            }
        }
    }
    match told.await {
        // Unlinked meanwhile (a delete, or a sweep that came first).
        Ok(linked) => Ok(linked.then_some(size)),
        Err(_) => Err(RegistryError::internal(
            "the blob check could not be recorded",
        )),
    }
}

/// The tokens of the GC leases passes of this process hold. Process-wide
/// on purpose: what it tells is whether a lease naming this replica was
/// taken by this process or left by an earlier one, and a token is added
/// before its lease is written, so no lease of a live pass is ever
/// mistaken for a dead one.
pub(crate) static HELD_HERE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn held_here(token: &str) -> bool {
    HELD_HERE.lock().expect("held leases lock").contains(token)
}

/// This registry process's replica id, which the GC lease names.
pub(crate) fn replica(app: &App) -> String {
    app.syncs
        .replica
        .get()
        .cloned()
        .unwrap_or_else(|| "this registry".to_string())
}

/// The sweep sequence now: read before relying on blob bytes.
pub(crate) async fn sweep_mark(app: &App) -> Result<SweepMark> {
    app.meta(|m| m.sweep_mark()).await
}

/// Ends a GC pass this replica left behind (see the module's "Dead
/// passes"), and makes a sweep sequence left odd by a lapsed lease
/// even; whether there was one.
pub(crate) async fn end_dead_pass(app: &App) -> Result<bool> {
    let (replica, now) = (replica(app), app.now());
    let ended = app
        .meta(move |m| m.end_dead_pass(&replica, held_here, now))
        .await?;
    if ended {
        tracing::warn!(
            "ended a garbage collection pass that a stopped registry process left unfinished; collect again"
        );
    }
    Ok(ended)
}

/// After recording a link or manifest that relies on `digests` since
/// `mark`: waits out a sweep that overlapped, and answers the digests
/// whose bytes it deleted (none unless a replica collected garbage
/// while this request ran). Writes drop [`App::sweep`] once their
/// record is committed, before this: a local sweep then sees the
/// record. One that still holds it shared waits only on another
/// replica's sweep (see "Lock order").
pub(crate) async fn settle(
    app: &App,
    mark: SweepMark,
    digests: &[Sha256Digest],
) -> Result<Vec<Sha256Digest>> {
    loop {
        let now = app.now();
        match app.meta(move |m| m.since_mark(mark, now)).await? {
            SinceMark::Untouched => return Ok(Vec::new()),
            // Left by this replica's earlier process: nothing will end
            // it but its lease lapsing, so end it now.
            SinceMark::Sweeping(l) if l.holder == replica(app) && !held_here(&l.token) => {
                end_dead_pass(app).await?;
            }
            SinceMark::Sweeping(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            SinceMark::Swept => break,
        }
    }
    let mut gone = Vec::new();
    for d in digests {
        if app.blobs.size(d).await?.is_none() {
            gone.push(*d);
        }
    }
    if !gone.is_empty() {
        tracing::warn!(
            blobs = gone.len(),
            "garbage collection on another replica deleted bytes a request was storing"
        );
    }
    Ok(gone)
}
