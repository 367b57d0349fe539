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

/// Upper bounds (seconds) of the admission latency histogram buckets.
pub const ADMISSION_BUCKETS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Clone, Debug, Default)]
pub struct AdmissionStats {
    pub count: u64,
    pub seconds: f64,
    /// Cumulative counts per bucket of `ADMISSION_BUCKETS`.
    pub buckets: [u64; 8],
}

type AdmissionKey = (&'static str, &'static str, String, &'static str);

fn admissions() -> &'static Mutex<BTreeMap<AdmissionKey, AdmissionStats>> {
    static ADMISSIONS: OnceLock<Mutex<BTreeMap<AdmissionKey, AdmissionStats>>> = OnceLock::new();
    ADMISSIONS.get_or_init(Default::default)
}

/// Counts one admission request by kind, step (mutate/validate), operation and result.
pub fn record_admission(
    kind: &'static str,
    step: &'static str,
    operation: &str,
    result: &'static str,
    elapsed: std::time::Duration,
) {
    if let Ok(mut a) = admissions().lock() {
        let s = a
            .entry((kind, step, operation.to_owned(), result))
            .or_default();
        s.count += 1;
        let secs = elapsed.as_secs_f64();
        s.seconds += secs;
        for (i, bound) in ADMISSION_BUCKETS.iter().enumerate() {
            if secs <= *bound {
                s.buckets[i] += 1;
            }
        }
    }
}

pub fn admission_stats() -> BTreeMap<AdmissionKey, AdmissionStats> {
    admissions().lock().map(|a| a.clone()).unwrap_or_default()
}
