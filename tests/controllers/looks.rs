//! capms looked, and did (or did not) act: the positive signals behind every "capms did not
//! act" of these tests (see `capms_test_support::activity`).

use super::*;
pub(super) use support::activity::version_of;
use support::activity::{Actions, Reconciled};

impl Env {
    /// capms's actions now.
    pub(super) async fn actions(&self) -> Actions {
        let port = self.metrics_port.expect("a capms started by start_capms");
        Actions::now(port, &self.sim.sim).await
    }

    /// Waits until capms has reconciled `kind` `name` (in the test's namespace) `times` times at
    /// `version` or later; those reconciles.
    pub(super) async fn looked(
        &self,
        kind: &str,
        name: &str,
        version: u64,
        times: usize,
    ) -> Vec<Reconciled> {
        let object = format!("{kind} {}/{name}", self.ns.name);
        let log = || {
            self.capms
                .as_ref()
                .map(ChildProcess::log_text)
                .unwrap_or_default()
        };
        support::activity::looked(log, &object, version, times).await
    }

    /// Waits until capms reports the MetalStackCluster paused (or not): its Paused condition.
    pub(super) async fn paused_seen(&self, paused: bool) {
        self.paused_seen_on(MSC, paused).await;
    }

    /// Waits until capms reports MetalStackCluster `name` paused (or not).
    pub(super) async fn paused_seen_on(&self, name: &str, paused: bool) {
        let clusters: Api<MetalStackCluster> = Api::namespaced(self.client(), &self.ns.name);
        let status = if paused { "True" } else { "False" };
        wait_condition(&clusters, name, &format!("Paused={status}"), |c| {
            c.status
                .as_ref()
                .and_then(|s| condition(&s.conditions, "Paused"))
                .is_some_and(|c| c.status == status)
        })
        .await;
    }

    /// Waits until machine `id` has phoned home, as metal-api reports it.
    pub(super) async fn phoned_home(&self, id: &str) {
        let what = format!("machine {id} to phone home");
        eventually(&what, support::LOADED_MACHINE_WAIT, || async {
            let machine = self.sim.sim.state().machine(id).ok()?;
            (machine.health() == MachineHealth::Ready).then_some(())
        })
        .await;
    }

    /// Waits until nothing waits in capms's work queues and no reconcile runs.
    pub(super) async fn idle(&self) {
        let port = self.metrics_port.expect("a capms started by start_capms");
        eventually_seen("capms idle", support::LOADED_MACHINE_WAIT, || async {
            let text = support::activity::metrics(port).await;
            let text = text.ok_or_else(|| format!("no metrics on port {port}"))?;
            let busy: Vec<&str> = text
                .lines()
                .filter(|l| {
                    l.starts_with("workqueue_depth{")
                        || l.starts_with("workqueue_unfinished_work_seconds{")
                })
                .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) != Some(0.0))
                .collect();
            match busy.is_empty() {
                true => Ok(()),
                false => Err(busy.join("; ")),
            }
        })
        .await;
    }

    /// capms took no action since `before`: no write to Kubernetes but status reports, none to
    /// metal-api.
    pub(super) async fn did_nothing_since(&self, before: &Actions, what: &str) {
        let now = self.actions().await;
        assert_eq!(&now, before, "capms acted: {what}");
    }
}

/// Annotates the object (a change capms's watch wakes it for, and nothing else it reads): its
/// resourceVersion after, to wait for capms to look at.
pub(super) async fn nudge<K>(api: &Api<K>, name: &str) -> u64
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let at = jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {"test.capms.metal-stack.io/nudged-at": at}}});
    let nudged = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("nudging {name}: {e}"));
    version_of(&nudged)
}
