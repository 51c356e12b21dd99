//! `/metrics` on `metrics_address`, in Prometheus' text format: the
//! snapshots by kind, the versions mounted, and where their reads came
//! from (bytes fetched, cache hits and misses), summed over the mounts the
//! fuse manager serves now. Read at each scrape, so a restarted daemon
//! reports the same mounts.
//!
//! The endpoint has no authentication, so it binds loopback addresses only;
//! a node agent scrapes it and forwards.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::store::Kind;
use super::{DaemonError, SnapshotService};

#[derive(Clone)]
struct Scrape {
    service: SnapshotService,
    prometheus: PrometheusHandle,
}

/// Starts serving `/metrics` on `addr` in the background.
pub async fn serve(addr: SocketAddr, service: SnapshotService) -> Result<(), DaemonError> {
    let err = |message: String| DaemonError::Listen {
        path: addr.to_string(),
        message,
    };
    if !addr.ip().is_loopback() {
        return Err(err(
            "metrics_address must be a loopback address: /metrics has no authentication".into(),
        ));
    }
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| err(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| err(e.to_string()))?;
    let app = axum::Router::new()
        .route("/metrics", get(scrape))
        .with_state(Scrape {
            service,
            prometheus,
        });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(())
}

async fn scrape(State(s): State<Scrape>) -> Result<String, (StatusCode, String)> {
    let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, e);
    let store = std::sync::Arc::clone(s.service.store());
    let all = tokio::task::spawn_blocking(move || store.list())
        .await
        .map_err(|e| unavailable(e.to_string()))?
        .map_err(|e| unavailable(e.to_string()))?;
    for (kind, name) in [
        (Kind::Committed, "committed"),
        (Kind::Active, "active"),
        (Kind::View, "view"),
    ] {
        let n = all.iter().filter(|(_, r)| r.kind == kind).count();
        metrics::gauge!("sealvol_snapshotter_snapshots", "kind" => name).set(n as f64);
    }
    let mounts = s
        .service
        .keeper()
        .list()
        .await
        .map_err(|e| unavailable(format!("fuse manager: {}", e.message())))?;
    metrics::gauge!("sealvol_snapshotter_mounts").set(mounts.len() as f64);
    let sum = |f: fn(&super::fuse_manager::pb::Stats) -> u64| -> f64 {
        mounts
            .iter()
            .filter_map(|m| m.stats.as_ref())
            .map(f)
            .sum::<u64>() as f64
    };
    metrics::gauge!("sealvol_snapshotter_fetched_bytes").set(sum(|s| s.bytes_downloaded));
    metrics::gauge!("sealvol_snapshotter_cache_misses").set(sum(|s| s.chunks_downloaded));
    metrics::gauge!("sealvol_snapshotter_cache_hits")
        .set(sum(|s| s.chunks_from_disk + s.memory_hits));
    metrics::gauge!("sealvol_snapshotter_read_errors").set(sum(|s| s.read_errors));
    Ok(s.prometheus.render())
}
