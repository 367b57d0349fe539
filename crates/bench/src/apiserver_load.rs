//! What a run costs the kube-apiserver that capms shares with Cluster API, and Cluster API's own
//! pace, in a provider run and in the baseline with Cluster API alone (`alone.rs`). On a small
//! management cluster the apiserver is the bottleneck, so what capms costs it is what it slows
//! Cluster API by.

use crate::measure::{APISERVER_REQUESTS, Counters};
use serde::Serialize;
use std::collections::BTreeMap;

/// The kube-apiserver's work while the machines were provisioned.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ApiserverLoad {
    /// kube-apiserver's CPU seconds.
    pub cpu_seconds: f64,
    /// Every client's requests, per machine (workers and firewalls; workers alone in the
    /// baseline).
    pub requests_per_machine: f64,
    /// capms's own requests (as its client counts them), per machine; none alone.
    pub capms_requests_per_machine: f64,
    /// Everyone else's, per machine: Cluster API's manager, the controller-manager, the
    /// apiserver's own loopback client, and the benchmark's (its two watches, `kubectl apply`,
    /// the `/metrics` scrapes).
    pub other_requests_per_machine: f64,
    /// The apiserver's calls to capms's admission webhooks, per machine.
    pub admission_calls_per_machine: f64,
    /// Every client's requests per machine by `VERB resource[/subresource]`.
    pub requests_per_machine_by_verb_and_resource: BTreeMap<String, f64>,
    /// Writes of a Machine's status answered 409 Conflict, per worker: Cluster API's Machine
    /// controller raced a newer copy, mostly after a write to the MetalStackMachine woke it.
    pub machine_status_conflicts_per_worker: f64,
}

impl ApiserverLoad {
    /// From the apiserver's counters and (in a provider run) capms's own totals over the same
    /// span: its apiserver requests and the admission calls it answered.
    pub fn new(
        (machines, workers): (usize, usize),
        cpu_seconds: f64,
        apiserver: &Counters,
        (capms_requests, admissions): (f64, f64),
    ) -> ApiserverLoad {
        let per_machine = |n: f64| n / machines.max(1) as f64;
        let all = apiserver.total(APISERVER_REQUESTS);
        let conflicts = apiserver.sum_where(APISERVER_REQUESTS, |l| {
            let is = |k: &str, v: &str| l.get(k).is_some_and(|x| x == v);
            is("code", "409") && is("resource", "machines") && is("subresource", "status")
        });
        ApiserverLoad {
            cpu_seconds,
            requests_per_machine: per_machine(all),
            capms_requests_per_machine: per_machine(capms_requests),
            other_requests_per_machine: per_machine(all - capms_requests),
            admission_calls_per_machine: per_machine(admissions),
            requests_per_machine_by_verb_and_resource: apiserver
                .apiserver_requests_by_verb_and_resource()
                .into_iter()
                .map(|(k, v)| (k, per_machine(v)))
                .collect(),
            machine_status_conflicts_per_worker: conflicts / workers.max(1) as f64,
        }
    }
}

/// The same workload with Cluster API alone: its pace and what it costs the apiserver.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterApiAlone {
    /// When Cluster API created the last MetalStackMachine.
    pub last_machine_created_seconds: f64,
    /// When the last MetalStackMachine's Machine owned it: Cluster API's pace, the contract's
    /// signal for a provider to start.
    pub last_owned_seconds: f64,
    /// When the last MachineSet reported every replica it wants (what ends capms's wait for
    /// it), after a second pass over its Machines.
    pub machine_sets_reported_seconds: f64,
    pub apiserver: ApiserverLoad,
    /// The same workload with a provider that takes no time (`--ideal`).
    pub ideal: Option<IdealProvider>,
}

/// When the provider taking no time takes up a MetalStackMachine.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdealStart {
    /// As soon as its Machine owns it.
    Owned,
    /// Once its MachineSet has reported every replica, as capms waits for it.
    Reported,
}

/// The run with the provider taking no time.
#[derive(Clone, Debug, Serialize)]
pub struct IdealProvider {
    pub start: IdealStart,
    /// When the last MetalStackMachine was ready.
    pub all_ready_seconds: f64,
    /// When the last MetalStackMachine was owned: Cluster API's pace beside this provider.
    pub last_owned_seconds: f64,
    /// When the last MachineSet reported every replica.
    pub machine_sets_reported_seconds: f64,
    /// The apiserver's load from the clusters' creation to all ready.
    pub apiserver: ApiserverLoad,
}
