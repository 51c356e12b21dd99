//! What the in-process registry tests share: the router `sealvol serve`
//! builds over an app, with the default configuration (open, loopback) and
//! a metrics recorder of its own.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;
use sealvol_registry::server::{router, Config};
use sealvol_registry::state::app::App;

pub fn router_of(app: &Arc<App>) -> axum::Router {
    let handle = PrometheusBuilder::new().build_recorder().handle();
    let config = Config::default();
    let auth = config.auth(config.addr, Arc::clone(&app.meta)).unwrap();
    router(Arc::clone(app), auth, &config, handle)
}
