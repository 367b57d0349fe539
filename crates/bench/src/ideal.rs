//! The workload with Cluster API and a provider that takes no time (`--ideal`): the benchmark
//! names each MetalStackMachine's machine and marks it ready the moment it may, and with
//! `--nodes` registers its Node as a kubelet would, once the machine has gone through the
//! lifecycle after its MetalStackMachine was owned. No metal-api, no bootstrap data: what is
//! left is Cluster API's own work, creating the machines and taking each one up as ready, on
//! this apiserver. When that run reaches all ready is the soonest any provider could, and tells
//! how much of a provider run's time is the provider's.

use crate::Args;
use crate::alone::{Baseline, last, machine_sets_reported};
use crate::apiserver_load::{ApiserverLoad, IdealProvider, IdealStart};
use crate::scenario::timeout;
use crate::watch::{Seen, Timeline};
use capms::api::MetalStackMachine;
use futures::{StreamExt, stream};
use kube::api::{Api, Patch, PatchParams};
use metal_sim::workload::nodes::{self, WantedNode};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many MetalStackMachines it marks at once (as many as capms's reconcile workers).
const CONCURRENCY: usize = 30;
/// How often it looks for MetalStackMachines to mark.
const LOOK: Duration = Duration::from_millis(200);

pub async fn run(args: &Args, start: IdealStart) -> IdealProvider {
    let mut baseline = Baseline::start(args, "bench-ideal", "work-ideal").await;
    let workers = args.clusters * args.workers;
    let client = baseline.ns.client.clone();
    let wanted = Arc::new(Mutex::new(BTreeMap::new()));
    let kubelets = args
        .nodes
        .then(|| spawn_kubelets(client.clone(), wanted.clone()));
    let api: Api<MetalStackMachine> = Api::namespaced(client.clone(), &baseline.ns.name);
    let deadline = Instant::now() + timeout(args);
    let mut marked = BTreeSet::new();
    // Each MetalStackMachine's machine number, given when it boots or is marked.
    let mut numbers = BTreeMap::new();
    let lifecycle = 3.0 * args.step;
    loop {
        let seen = baseline.timelines.snapshot().resolved(|_| None);
        if seen.ready_machines() >= workers {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bench: timed out after {:?} waiting for the provider taking no time to make every machine ready ({} of {workers})",
            timeout(args),
            seen.ready_machines()
        );
        let due = seen
            .machines
            .iter()
            .filter(|(name, t)| !marked.contains(*name) && is_due(t, start));
        let due: Vec<String> = due.map(|(name, _)| name.clone()).collect();
        let now = baseline.timelines.now();
        register(&booted(&seen, now, lifecycle), &mut numbers, &wanted);
        let marks = due.into_iter().map(|name| {
            let n = number(&mut numbers, &name);
            mark(&api, name, n)
        });
        let results: Vec<_> = stream::iter(marks)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let failed = record(results, &wanted, &seen, &mut marked);
        if let Some(first) = failed.first() {
            let n = failed.len();
            eprintln!("bench: the provider taking no time failed {n} time(s), first: {first}");
        }
        tokio::time::sleep(LOOK).await;
    }
    baseline.cpu.phase("provisioning");
    let counters = baseline.counters().await;
    let cpu_seconds = baseline.cpu.usage().cpu_seconds_by_phase["provisioning"];
    let seen = baseline.timelines.snapshot();
    let present = || seen.machines.values().filter(|t| t.gone.is_none());
    let reported = machine_sets_reported(&baseline.timelines, args).await;
    if let Some(kubelets) = kubelets {
        kubelets.abort();
    }
    baseline.end(args).await;
    // Nodes whose Machine Cluster API did not delete with it.
    if let Err(e) = nodes::sync(&client, &BTreeMap::new()).await {
        eprintln!("bench: removing the provider taking no time's Nodes: {e}");
    }
    IdealProvider {
        start,
        all_ready_seconds: last(present().filter_map(|t| t.ready)),
        last_owned_seconds: last(present().filter_map(|t| t.owned)),
        machine_sets_reported_seconds: reported.unwrap_or(f64::NAN),
        apiserver: ApiserverLoad::new((workers, workers), cpu_seconds, &counters, (0.0, 0.0)),
    }
}

/// Takes the marks' `results` down: the machines marked, and the Nodes `wanted` of the
/// MetalStackMachines `seen` gone removed. Returns what failed, to be tried again.
fn record(
    results: Vec<Result<String, String>>,
    wanted: &Mutex<BTreeMap<String, WantedNode>>,
    seen: &Seen,
    marked: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut nodes = wanted.lock().expect("lock");
    // A machine whose MetalStackMachine went (a replica too many) takes its Node along.
    nodes.retain(|name, _| seen.machines.get(name).is_some_and(|t| t.gone.is_none()));
    let mut failed = vec![];
    for result in results {
        match result {
            Ok(name) => {
                marked.insert(name);
            }
            Err(e) => failed.push(e),
        }
    }
    failed
}

/// The MetalStackMachines `seen` whose machine has booted at `now`: owned for `lifecycle`
/// seconds or longer. In a provider run the machine installs during the wait for its
/// MachineSet, and its kubelet registers the Node once it boots, before the provider names it.
fn booted(seen: &Seen, now: f64, lifecycle: f64) -> Vec<String> {
    let booted = |t: &Timeline| t.gone.is_none() && t.owned.is_some_and(|o| now - o >= lifecycle);
    let machines = seen.machines.iter();
    machines
        .filter(|(_, t)| booted(t))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The number of `name`'s machine: the next one for a MetalStackMachine without one.
fn number(numbers: &mut BTreeMap<String, usize>, name: &str) -> usize {
    let next = numbers.len();
    *numbers.entry(name.to_owned()).or_insert(next)
}

/// Wants the Node of each of the `booted` MetalStackMachines' machines.
fn register(
    booted: &[String],
    numbers: &mut BTreeMap<String, usize>,
    wanted: &Mutex<BTreeMap<String, WantedNode>>,
) {
    let mut nodes = wanted.lock().expect("lock");
    for name in booted {
        let n = number(numbers, name);
        nodes.entry(name.clone()).or_insert_with(|| node(n));
    }
}

/// The Node of the `n`th machine's kubelet.
fn node(n: usize) -> WantedNode {
    let (provider_id, address) = machine(n);
    WantedNode {
        provider_id,
        address: Some(address.to_string()),
        control_plane: false,
        version: None,
        ready: true,
        boot_id: format!("ideal-{n}"),
    }
}

/// May the provider take up the MetalStackMachine of timeline `t`?
fn is_due(t: &Timeline, start: IdealStart) -> bool {
    t.gone.is_none()
        && match start {
            IdealStart::Owned => t.owned.is_some(),
            IdealStart::Reported => t.owned.is_some() && t.released.is_some(),
        }
}

/// The `n`th machine's provider ID (`metal://<partition>/<uuid>`, as the CRD wants it) and its
/// address, in loopback: 127.1.0.0 on.
fn machine(n: usize) -> (String, Ipv4Addr) {
    let n = u32::try_from(n).unwrap_or(u32::MAX) & 0xffff;
    let id = format!("00000000-0000-4000-8000-{n:012x}");
    (
        format!("metal://ideal/{id}"),
        Ipv4Addr::from(0x7f01_0000 | n),
    )
}

/// Names `name`'s machine, the `n`th, and marks it ready, in the two writes a provider makes.
async fn mark(api: &Api<MetalStackMachine>, name: String, n: usize) -> Result<String, String> {
    let (provider_id, address) = machine(n);
    let params = PatchParams::default();
    let spec = json!({"spec": {"providerID": provider_id}});
    api.patch(&name, &params, &Patch::Merge(&spec))
        .await
        .map_err(|e| format!("naming {name}'s machine: {e}"))?;
    let status = json!({"status": {
        "ready": true,
        "initialization": {"provisioned": true},
        "addresses": [{"type": "InternalIP", "address": address.to_string()}],
    }});
    api.patch_status(&name, &params, &Patch::Merge(&status))
        .await
        .map_err(|e| format!("marking {name} ready: {e}"))?;
    Ok(name)
}

/// Registers the `wanted` Nodes once a second, as the simulator's node agent does in a provider
/// run.
fn spawn_kubelets(
    client: kube::Client,
    wanted: Arc<Mutex<BTreeMap<String, WantedNode>>>,
) -> tokio::task::JoinHandle<()> {
    let agent = "the provider taking no time".to_owned();
    nodes::spawn_with(client, Duration::from_secs(1), agent, move || {
        wanted.lock().expect("lock").clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(owned: Option<f64>, released: Option<f64>, gone: Option<f64>) -> Timeline {
        Timeline {
            owned,
            released,
            gone,
            ..Default::default()
        }
    }

    #[test]
    fn a_machine_is_due_once_owned_or_once_its_machine_set_reported() {
        let (owned, reported) = (IdealStart::Owned, IdealStart::Reported);
        let fresh = timeline(None, None, None);
        assert!(!is_due(&fresh, owned) && !is_due(&fresh, reported));
        let waiting = timeline(Some(1.0), None, None);
        assert!(is_due(&waiting, owned) && !is_due(&waiting, reported));
        let released = timeline(Some(1.0), Some(2.0), None);
        assert!(is_due(&released, owned) && is_due(&released, reported));
        let gone = timeline(Some(1.0), Some(2.0), Some(3.0));
        assert!(!is_due(&gone, owned) && !is_due(&gone, reported));
    }

    fn seen(machines: &[(&str, Timeline)]) -> Seen {
        let mut seen = Seen::default();
        for (name, t) in machines {
            seen.machines.insert((*name).into(), t.clone());
        }
        seen
    }

    #[test]
    fn marks_are_recorded_failures_kept_for_later_and_nodes_of_gone_machines_dropped() {
        let seen = seen(&[
            ("kept", timeline(Some(1.0), Some(2.0), None)),
            ("gone", timeline(Some(1.0), Some(2.0), Some(5.0))),
            ("new", timeline(Some(1.0), Some(2.0), None)),
        ]);
        let wanted = Mutex::new(BTreeMap::from([
            ("kept".to_owned(), node(0)),
            ("gone".to_owned(), node(1)),
        ]));
        let mut marked = BTreeSet::from(["kept".to_owned(), "gone".to_owned()]);
        let results = vec![Ok("new".to_owned()), Err("refused".to_owned())];
        let failed = record(results, &wanted, &seen, &mut marked);
        assert_eq!(failed, ["refused"]);
        assert!(
            marked.contains("new"),
            "a machine marked is not marked again"
        );
        let nodes = wanted.into_inner().expect("lock");
        let names: Vec<&str> = nodes.keys().map(String::as_str).collect();
        assert_eq!(names, ["kept"], "the Node of a gone machine goes");
    }

    #[test]
    fn a_machine_boots_a_lifecycle_after_it_is_owned_and_keeps_its_number() {
        let seen = seen(&[
            ("early", timeline(Some(1.0), None, None)),
            ("late", timeline(Some(9.0), None, None)),
            ("unowned", timeline(None, None, None)),
            ("gone", timeline(Some(1.0), None, Some(5.0))),
        ]);
        assert_eq!(booted(&seen, 10.0, 3.0), ["early"]);
        assert_eq!(booted(&seen, 12.0, 3.0), ["early", "late"]);
        let (mut numbers, wanted) = (BTreeMap::new(), Mutex::new(BTreeMap::new()));
        assert_eq!(number(&mut numbers, "late"), 0, "marked before it booted");
        register(&booted(&seen, 12.0, 3.0), &mut numbers, &wanted);
        assert_eq!(number(&mut numbers, "early"), 1);
        assert_eq!(
            number(&mut numbers, "late"),
            0,
            "a machine keeps its number"
        );
        let nodes = wanted.into_inner().expect("lock");
        let ids: Vec<&str> = nodes.values().map(|n| n.provider_id.as_str()).collect();
        assert_eq!(
            ids,
            [machine(1).0, machine(0).0],
            "each Node names its machine"
        );
    }

    #[test]
    fn each_machine_has_its_own_provider_id_and_loopback_address() {
        let (id, address) = machine(0x1_0203);
        assert_eq!(id, "metal://ideal/00000000-0000-4000-8000-000000000203");
        assert_eq!(address, Ipv4Addr::new(127, 1, 2, 3));
        assert_ne!(machine(1), machine(2));
        assert!(machine(usize::MAX).1.is_loopback());
    }
}
