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
