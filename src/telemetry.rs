//! Logging setup and the process-wide counters other modules report to.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Structured logs on stderr; `RUST_LOG` filters, `CAPMS_LOG_FORMAT=json` switches to JSON.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("CAPMS_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn metal_calls() -> &'static Mutex<BTreeMap<(&'static str, u16), u64>> {
    static CALLS: OnceLock<Mutex<BTreeMap<(&'static str, u16), u64>>> = OnceLock::new();
    CALLS.get_or_init(Default::default)
}

/// Counts one metal-api call by endpoint and HTTP status (0: no answer).
pub fn record_metal_call(endpoint: &'static str, status: u16) {
    if let Ok(mut calls) = metal_calls().lock() {
        *calls.entry((endpoint, status)).or_default() += 1;
    }
}

/// Snapshot of the metal-api call counters.
pub fn metal_call_counts() -> BTreeMap<(&'static str, u16), u64> {
    metal_calls().lock().map(|c| c.clone()).unwrap_or_default()
}

/// Reconcile counts and total seconds by kind and outcome (`success` or an error category).
#[derive(Clone, Debug, Default)]
pub struct ReconcileStats {
    pub count: u64,
    pub seconds: f64,
}

fn reconciles() -> &'static Mutex<BTreeMap<(&'static str, &'static str), ReconcileStats>> {
    static RECONCILES: OnceLock<Mutex<BTreeMap<(&'static str, &'static str), ReconcileStats>>> =
        OnceLock::new();
    RECONCILES.get_or_init(Default::default)
}

pub fn record_reconcile(kind: &'static str, outcome: &'static str, elapsed: std::time::Duration) {
    if let Ok(mut r) = reconciles().lock() {
        let s = r.entry((kind, outcome)).or_default();
        s.count += 1;
        s.seconds += elapsed.as_secs_f64();
    }
}

pub fn reconcile_stats() -> BTreeMap<(&'static str, &'static str), ReconcileStats> {
    reconciles().lock().map(|r| r.clone()).unwrap_or_default()
}
