//! Crash points, for the tests that kill capms right after one of its external writes. Only
//! debug builds (the tests' builds) have them; in a release build `after_write` does nothing.
//!
//! `CAPMS_CRASH_AFTER_WRITES=<n>` kills the process with SIGKILL right after its n-th external
//! write: a step that wrote to metal-api or Kubernetes, or a status write. Before dying it says
//! on stderr which write that was, so a test can tell its kill points apart.

/// The environment variable that arms the crash points.
pub const CRASH_AFTER_WRITES: &str = "CAPMS_CRASH_AFTER_WRITES";

/// Counts an external write, `what` describing it, and dies if it is the one to die after.
#[cfg(debug_assertions)]
pub fn after_write(what: impl FnOnce() -> String) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static AFTER: OnceLock<Option<u64>> = OnceLock::new();
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let after = AFTER.get_or_init(|| {
        std::env::var(CRASH_AFTER_WRITES)
            .ok()
            .and_then(|n| n.parse().ok())
    });
    let Some(after) = *after else { return };
    let written = WRITES.fetch_add(1, Ordering::SeqCst) + 1;
    if written < after {
        return;
    }
    eprintln!("crash point: killed after write {written}: {}", what());
    // SIGKILL, as an OOM kill or a lost node ends capms: nothing is flushed or cleaned up.
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    std::process::abort();
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn after_write(_what: impl FnOnce() -> String) {}
