//! Crash points, for the tests that kill capms at each of its external calls. Only debug builds
//! (the tests' builds) have them; in a release build every function here does nothing.
//!
//! A crash point lies just before and just after each external call a reconcile makes: every
//! metal-api call (of observe or of a step, also between the call and what the step does with
//! its answer) and every Kubernetes write (a step's, and the status write). A point is named by
//! where it is in the code and what it is around, not by the object:
//! `MetalStackMachine Allocate: metal-api machine_allocate after`,
//! `MetalStackCluster status: Kubernetes status before`.
//!
//! `CAPMS_CRASH_POINTS=<file>` arms them: the file lists points already killed at, one per line,
//! and capms kills itself with SIGKILL at the first point it passes that the file does not list,
//! after saying on stderr which (`crash point: <point>`); a point it passes it names on stderr
//! too (`crash point passed: <point>`). A test adds each kill's point to the
//! file and starts capms again: every life dies at a point no life died at before, until none is
//! left on its way. `CAPMS_CRASH_OBSERVE=0` leaves out the points around observe's reads.
//!
//! Armed, capms reconciles one object at a time across all its controllers ([`one_at_a_time`]):
//! the first new point a life meets is then the one it dies at, and a write killed before is
//! killed after in a later life, as nothing else can pass its point meanwhile.

use std::future::Future;

/// The environment variable that arms the crash points: the file of points already killed at.
pub const CRASH_POINTS: &str = "CAPMS_CRASH_POINTS";

/// The environment variable that, set to `0`, leaves out the crash points around observe's
/// reads (those around writes stay).
pub const CRASH_OBSERVE: &str = "CAPMS_CRASH_OBSERVE";

/// Before or after a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    Before,
    After,
}

/// Runs `work` as the code location `site` names (`MetalStackMachine Allocate`): the crash
/// points of the calls it makes carry that name.
pub async fn within<F: Future>(site: impl FnOnce() -> String, work: F) -> F::Output {
    #[cfg(debug_assertions)]
    if armed::points().is_some() {
        return armed::SITE.scope(site(), work).await;
    }
    let _ = site;
    work.await
}

/// Armed, the turn of one reconcile among all of capms's controllers (held for the whole
/// reconcile); otherwise none, and reconciles run as configured.
pub(crate) async fn one_at_a_time() -> Option<tokio::sync::MutexGuard<'static, ()>> {
    #[cfg(debug_assertions)]
    if armed::points().is_some() {
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        return Some(TURN.lock().await);
    }
    None
}

/// Passes the crash point at `moment` of `call` (`metal-api machine_find`) where the current
/// site is; outside a site (admission, the catalog's refresh) there is none.
pub fn passed(call: impl FnOnce() -> String, moment: Moment) {
    #[cfg(debug_assertions)]
    armed::passed(call, moment);
    #[cfg(not(debug_assertions))]
    let _ = (call, moment);
}

/// Observes metal-api's calls for `inner`, passing the crash points before and after each.
pub fn observing(
    inner: std::sync::Arc<dyn metal_api::CallObserver>,
) -> std::sync::Arc<dyn metal_api::CallObserver> {
    #[cfg(debug_assertions)]
    if armed::points().is_some() {
        return std::sync::Arc::new(armed::Observing(inner));
    }
    inner
}

#[cfg(debug_assertions)]
mod armed {
    use super::{CRASH_OBSERVE, CRASH_POINTS, Moment};
    use std::collections::HashSet;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    tokio::task_local! {
        pub(super) static SITE: String;
    }

    /// When armed: the points already killed at, and whether observe's reads have points.
    pub(super) struct Armed {
        killed: HashSet<String>,
        observe: bool,
    }

    pub(super) fn points() -> Option<&'static Armed> {
        static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
        ARMED
            .get_or_init(|| {
                let file = std::env::var_os(CRASH_POINTS)?;
                let text = std::fs::read_to_string(file).unwrap_or_default();
                Some(Armed {
                    killed: text.lines().map(str::to_owned).collect(),
                    observe: std::env::var(CRASH_OBSERVE).as_deref() != Ok("0"),
                })
            })
            .as_ref()
    }

    pub(super) fn passed(call: impl FnOnce() -> String, moment: Moment) {
        static DYING: AtomicBool = AtomicBool::new(false);
        let Some(armed) = points() else { return };
        let Ok(site) = SITE.try_with(String::clone) else {
            return;
        };
        if !armed.observe && site.ends_with(" observe") {
            return;
        }
        let when = match moment {
            Moment::Before => "before",
            Moment::After => "after",
        };
        let point = format!("{site}: {} {when}", call());
        if armed.killed.contains(&point) {
            // Says where the life is, so a test can tell a life in the middle of a call (its last
            // point passed a `before`) from one between calls.
            eprintln!("crash point passed: {point}");
            return;
        }
        if DYING.swap(true, Ordering::SeqCst) {
            // Another task is killing the process: this one goes no further.
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        eprintln!("crash point: {point}");
        // SIGKILL, as an OOM kill or a lost node ends capms: nothing is flushed or cleaned up.
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        std::process::abort();
    }

    pub(super) struct Observing(pub(super) std::sync::Arc<dyn metal_api::CallObserver>);

    impl metal_api::CallObserver for Observing {
        fn before(&self, endpoint: &'static str) {
            self.0.before(endpoint);
            passed(|| format!("metal-api {endpoint}"), Moment::Before);
        }

        fn observe(&self, endpoint: &str, status: u16) {
            self.0.observe(endpoint, status);
            passed(|| format!("metal-api {endpoint}"), Moment::After);
        }
    }
}
