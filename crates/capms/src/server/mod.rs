//! The manager's plain-HTTP endpoints: `/healthz` and `/readyz` for the kubelet, `/metrics` in
//! OpenMetrics text format.

pub(crate) mod metrics_auth;
pub mod tls;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What `/readyz` reports.
#[derive(Default, Debug)]
pub(crate) struct Readiness {
    /// The process is up and its HTTP endpoints serve.
    pub started: AtomicBool,
    /// This replica leads and its controllers run (false on a standby replica).
    pub leading: AtomicBool,
    /// The leader's controller caches have synced.
    pub caches_synced: Arc<AtomicBool>,
    /// The webhook certificate, when webhooks are served: ready only once it is loaded.
    pub webhook_cert: std::sync::OnceLock<Arc<tls::ReloadingCert>>,
}

impl Readiness {
    pub(crate) fn set_started(&self) {
        self.started.store(true, Ordering::SeqCst);
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(readiness): State<Arc<Readiness>>) -> impl IntoResponse {
    if !readiness.started.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: starting".to_owned(),
        );
    }
    if let Some(cert) = readiness.webhook_cert.get()
        && !cert.is_loaded()
        && let Err(e) = cert.refresh()
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: webhook certificate not loaded: {e}"),
        );
    }
    if readiness.leading.load(Ordering::SeqCst) && !readiness.caches_synced.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: controller caches not synced yet".to_owned(),
        );
    }
    (StatusCode::OK, "ok".to_owned())
}

async fn serve_metrics(State(metrics): State<Arc<crate::metrics::Metrics>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
}

pub(crate) fn health_router(readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

/// `/metrics`; with `auth`, only for callers allowed to get it (see [`metrics_auth`]).
pub(crate) fn metrics_router(
    metrics: Arc<crate::metrics::Metrics>,
    auth: Option<Arc<metrics_auth::MetricsAuth>>,
) -> Router {
    let router = Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(metrics);
    match auth {
        Some(auth) => router.layer(axum::middleware::from_fn_with_state(
            auth,
            metrics_auth::require_metrics_reader,
        )),
        None => router,
    }
}

/// Serves `router` on `addr` until `shutdown` resolves.
pub(crate) async fn serve_plain(
    addr: std::net::SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Limits of the webhook server: the apiserver sends small reviews and waits at most 10 s.
const MAX_REVIEW_BYTES: usize = 2 * 1024 * 1024;
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves `router` over TLS (1.2 and 1.3, the certificate re-read when it changes on disk) until
/// `handle` is told to shut down.
pub async fn serve_tls(
    addr: std::net::SocketAddr,
    router: Router,
    cert: Arc<tls::ReloadingCert>,
    handle: axum_server::Handle<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let config = cert.server_config().map_err(std::io::Error::other)?;
    let rustls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(config));
    let app = router
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ));
    axum_server::bind_rustls(addr, rustls)
        .handle(handle)
        .serve(app.into_make_service())
        .await
}
