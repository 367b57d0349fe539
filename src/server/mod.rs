//! The manager's plain-HTTP endpoints: `/healthz` and `/readyz` for the kubelet, `/metrics` in
//! Prometheus text format.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What `/readyz` reports.
#[derive(Default, Debug)]
pub struct Readiness {
    /// The process is up and its HTTP endpoints serve.
    pub started: AtomicBool,
    /// This replica leads and its controllers run (false on a standby replica).
    pub leading: AtomicBool,
}

impl Readiness {
    pub fn set_started(&self) {
        self.started.store(true, Ordering::SeqCst);
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(readiness): State<Arc<Readiness>>) -> impl IntoResponse {
    if readiness.started.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: starting".to_owned(),
        )
    }
}

async fn metrics() -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        render_metrics(),
    )
}

/// The process's counters in Prometheus text exposition format.
pub fn render_metrics() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP capms_metal_api_requests_total metal-api calls by endpoint and HTTP status (0: no answer)."
    );
    let _ = writeln!(out, "# TYPE capms_metal_api_requests_total counter");
    for ((endpoint, status), n) in crate::telemetry::metal_call_counts() {
        let _ = writeln!(
            out,
            "capms_metal_api_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP capms_reconcile_total Reconciles by kind and outcome (success or error category)."
    );
    let _ = writeln!(out, "# TYPE capms_reconcile_total counter");
    let stats = crate::telemetry::reconcile_stats();
    for ((kind, outcome), s) in &stats {
        let _ = writeln!(
            out,
            "capms_reconcile_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {}",
            s.count
        );
    }
    let _ = writeln!(
        out,
        "# HELP capms_reconcile_duration_seconds Time spent reconciling, by kind and outcome."
    );
    let _ = writeln!(out, "# TYPE capms_reconcile_duration_seconds summary");
    for ((kind, outcome), s) in &stats {
        let labels = format!("kind=\"{kind}\",outcome=\"{outcome}\"");
        let _ = writeln!(
            out,
            "capms_reconcile_duration_seconds_sum{{{labels}}} {}",
            s.seconds
        );
        let _ = writeln!(
            out,
            "capms_reconcile_duration_seconds_count{{{labels}}} {}",
            s.count
        );
    }
    out
}

pub fn health_router(readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

pub fn metrics_router() -> Router {
    Router::new().route("/metrics", get(metrics))
}

/// Serves `router` on `addr` until `shutdown` resolves.
pub async fn serve_plain(
    addr: std::net::SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
