//! Crash points, chosen, not timed. capms lives one after another, each killed with SIGKILL at
//! a crash point (a debug build's, just before or just after one of its external calls, also
//! inside a step) that no life of the same phase died at, across provisioning, a firewall
//! rollout, a scale-down, a clusterctl move, a worker's remediations and the deletion. So in each phase every point
//! capms passes on its way is a kill, each followed by recovery in the next life. After every
//! kill metal-api holds at most one allocation per owner and nothing without an owner; the
//! deletion frees everything; a phase gives the orphan sweep a leaked machine, IP and network to
//! free. Points are told apart by code location and what they are around
//! (`MetalStackMachine Allocate: metal-api machine_allocate after`), never by object.
//!
//! Every run fails unless every write site of `write-sites.txt` (every step of every kind and
//! its status write) was killed at before and after its write. `CAPMS_CRASH_WORKERS` sets the
//! size: 2 workers in `make test`, which kills around writes only and needs at least
//! [`MIN_POINTS`] distinct points; `make chaos` runs 40 with `CAPMS_CRASH_READS=1`, which kills
//! around observe's metal-api reads too.

use super::*;
use capms::reconciler::crash_points::{CRASH_OBSERVE, CRASH_POINTS};
use std::future::Future;
use std::time::Instant;

mod api_v2;
mod go_cluster;
mod orphans;
mod remediation;
mod report;

use go_cluster::{GO, GO_CLUSTER, GO_FIREWALL_WAITING_SIZE, go_provider_cluster};

/// The distinct kill points `make test`'s run must reach (around writes only, 2 workers).
const MIN_POINTS: usize = 90;

/// What the lives of one run went through.
#[derive(Default)]
struct Lives {
    /// Each kill: the phase and its point.
    kills: Vec<(String, String)>,
    /// The file a life reads the points it must pass from: its phase's kills so far.
    file: std::path::PathBuf,
    /// Kill around observe's reads too (`make chaos`), not only around writes.
    reads: bool,
    /// Log lines scanned for secrets (`capms_test_support::secrets`).
    lines: usize,
    /// capms's flags in every life.
    args: Vec<&'static str>,
}

/// The bootstrap data of the run's machines, one line of it unmistakable.
const BOOTSTRAP: &str = "#!/bin/sh\necho capms-bootstrap-data-9f3c2a\n";

impl Lives {
    /// The lives of a run in `env`, each capms started with `args`; around observe's reads too
    /// when `CAPMS_CRASH_READS=1`.
    fn of(env: &Env, args: Vec<&'static str>) -> Lives {
        Lives {
            file: env.work.path().join("crash-points.txt"),
            reads: std::env::var("CAPMS_CRASH_READS").as_deref() == Ok("1"),
            args,
            ..Default::default()
        }
    }

    /// capms lives, each killed at a point no life of `phase` died at, until `goal` holds.
    async fn until<F, Fut>(&mut self, env: &Env, phase: &str, goal: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = bool>,
    {
        // Generous: a loaded machine makes every life slower, and a phase takes dozens.
        let deadline = Instant::now() + Duration::from_secs(1200);
        loop {
            let passed: Vec<&str> = self
                .kills
                .iter()
                .filter(|(p, _)| p == phase)
                .map(|(_, point)| point.as_str())
                .collect();
            std::fs::write(&self.file, passed.join("\n")).expect("the points file");
            let file = self.file.display().to_string();
            // At debug level, where a leak is likeliest.
            let reads = if self.reads { "1" } else { "0" };
            let crash = [
                (CRASH_POINTS, file.as_str()),
                (CRASH_OBSERVE, reads),
                ("RUST_LOG", "debug"),
            ];
            // Armed, capms reconciles one object at a time (see its crash_points).
            let args = &self.args;
            let mut capms = env.spawn_capms_with_env("capms-life", args, free_port(), &crash);
            while capms.is_running() {
                // A life in the middle of a call ends the phase only once past it: a goal met by
                // the call's write would otherwise never see the kill just after it.
                if goal().await && !mid_call(&capms.log_text()) {
                    // Dropping it kills the life that is running.
                    self.scan(&capms.log_text());
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "phase {phase} did not end after {} kills; the last life's log:\n{}",
                    self.kills.len(),
                    capms.log_tail()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let log = capms.log_text();
            self.scan(&log);
            let point = log
                .lines()
                .find_map(|l| l.split_once("crash point: ").map(|(_, p)| p.to_owned()))
                .unwrap_or_else(|| {
                    panic!(
                        "capms died without reaching a crash point:\n{}",
                        capms.log_tail()
                    )
                });
            nothing_twice_nothing_unowned(&env.metal_state().await, &point);
            self.kills.push((phase.to_owned(), point));
        }
    }
}

/// Was the last point a life passed (one killed at before) just before a call? Then the call's
/// `after` lies ahead: the life passes it or dies there.
fn mid_call(log: &str) -> bool {
    log.lines()
        .rev()
        .find_map(|l| l.split_once("crash point passed: "))
        .is_some_and(|(_, point)| point.ends_with(" before"))
}

impl Lives {
    /// No secret in any line of a life's log (the bootstrap data is one of them).
    fn scan(&mut self, log: &str) {
        self.lines += log.lines().count();
        if let Some(line) = support::secrets::leak(log) {
            panic!("a secret in capms's log: {line}");
        }
    }
}

/// At most one machine per owner, each with exactly one owner; at most one private network and
/// one control-plane IP.
pub(super) fn nothing_twice_nothing_unowned(
    state: &(Vec<Network>, Vec<Ip>, Vec<Machine>),
    after: &str,
) {
    let (networks, ips, machines) = state;
    let mut owners = std::collections::BTreeMap::new();
    for m in machines.iter().filter(|m| m.allocation.is_some()) {
        let owner: Vec<&String> = m.tags.iter().filter(|t| t.contains("-uid=")).collect();
        assert_eq!(
            owner.len(),
            1,
            "after {after}: machine {} has owner tags {owner:?}",
            m.id
        );
        if let Some(other) = owners.insert(owner[0].clone(), m.id.clone()) {
            panic!(
                "after {after}: machines {other} and {} for {}",
                m.id, owner[0]
            );
        }
    }
    let cluster_of = |marks: &[String]| {
        marks
            .iter()
            .find(|m| m.contains("/cluster-resource="))
            .cloned()
    };
    let mut networks_of = std::collections::BTreeMap::<_, usize>::new();
    for n in networks {
        let marks: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        *networks_of.entry(cluster_of(&marks)).or_default() += 1;
    }
    assert!(
        networks_of.values().all(|n| *n <= 1),
        "after {after}: networks {networks:?}"
    );
    let mut ips_of = std::collections::BTreeMap::<_, usize>::new();
    for ip in ips.iter().filter(|ip| ip.name.ends_with("-control-plane")) {
        *ips_of.entry(cluster_of(&ip.tags)).or_default() += 1;
    }
    assert!(
        ips_of.values().all(|n| *n <= 1),
        "after {after}: IPs {ips:?}"
    );
}

fn workers() -> usize {
    std::env::var("CAPMS_CRASH_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

/// The lab with enough machines for the firewall, its rollout and `workers` workers.
/// What a watch on metal-api saw until it was stopped.
pub(super) struct Looks {
    pub count: usize,
    /// capms's highest call rate over about a second.
    pub peak_calls_per_second: f64,
}

/// Looks at metal-api every 250 ms until stopped: never an owner with two machines (a look
/// panics if it finds one). Samples capms's call rate about every second on the way.
pub(super) fn watch_for_duplicates(
    env: &Env,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Looks>,
) {
    use std::sync::atomic::Ordering;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (stopped, sim) = (stop.clone(), env.sim.sim.clone());
    let watcher = tokio::spawn(async move {
        let mut looks = Looks {
            count: 0,
            peak_calls_per_second: 0.0,
        };
        let mut last = (Instant::now(), sim.stats().report().total);
        while !stopped.load(Ordering::SeqCst) {
            let machines = sim.state().machine_find(&Default::default());
            nothing_twice_nothing_unowned(&(Vec::new(), Vec::new(), machines), "a look");
            let waited = last.0.elapsed();
            if waited >= Duration::from_secs(1) {
                let total = sim.stats().report().total;
                let rate = (total - last.1) as f64 / waited.as_secs_f64();
                looks.peak_calls_per_second = looks.peak_calls_per_second.max(rate);
                last = (Instant::now(), total);
            }
            looks.count += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        looks
    });
    (stop, watcher)
}

pub(super) fn inventory(workers: usize) -> Inventory {
    let mut lab = Inventory::default_lab();
    let template = lab.machines[0].clone();
    // A size no machine has: a firewall of it waits, and is updated in place when its template
    // changes.
    let mut medium = lab.sizes[0].clone();
    medium.id = GO_FIREWALL_WAITING_SIZE.into();
    medium.name = GO_FIREWALL_WAITING_SIZE.into();
    lab.sizes.push(medium);
    // Workers, two firewalls and the one rolled in, the Go provider cluster's firewall.
    for n in lab.machines.len()..workers + 4 {
        let mut machine = template.clone();
        machine.id = format!("00000000-0000-0000-0001-{n:012}");
        machine.rack = format!("rack-{}", n % 3 + 1);
        lab.machines.push(machine);
    }
    lab
}

impl Env {
    pub(super) async fn all_ready(&self, workers: &[String]) -> bool {
        let clusters: Api<MetalStackCluster> = Api::namespaced(self.client(), &self.ns.name);
        let machines: Api<MetalStackMachine> = Api::namespaced(self.client(), &self.ns.name);
        let Ok(Some(c)) = clusters.get_opt(MSC).await else {
            return false;
        };
        let rolled = c.status.as_ref().and_then(|s| s.firewall.as_ref());
        let stable = rolled.is_none_or(|r| r.rolling_in.is_none());
        if !(c.status.as_ref().is_some_and(|s| s.ready) && stable) {
            return false;
        }
        for w in workers {
            let ready = machines.get_opt(w).await.ok().flatten();
            if !ready.is_some_and(|m| m.status.is_some_and(|s| s.ready)) {
                return false;
            }
        }
        true
    }

    /// The workers' MetalStackMachineTemplate shows its capacity.
    async fn template_capacity_known(&self) -> bool {
        let templates = self.dynamic(
            "infrastructure.cluster.x-k8s.io/v1alpha4",
            "MetalStackMachineTemplate",
            "metalstackmachinetemplates",
        );
        let template = templates.get_opt("workers").await.ok().flatten();
        template.is_some_and(|t| t.data["status"]["capacity"]["cpu"].is_string())
    }

    pub(super) async fn allocated_machines(&self) -> usize {
        let (_, _, machines) = self.metal_state().await;
        machines.iter().filter(|m| m.allocation.is_some()).count()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn capms_killed_around_each_of_its_calls_never_allocates_twice_nor_leaks() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: a release build of capms has no crash points");
        return;
    }
    let size = workers();
    let env = Env::with_inventory("crash-points", inventory(size)).await;
    let initial = env.metal_state().await;
    let mut lives = Lives::of(&env, orphans::SWEEPING.to_vec());
    let names: Vec<String> = (0..size).map(|i| format!("worker-{i}")).collect();
    lifecycle(&env, &mut lives, &names).await;
    remediation::remediated(&env, &mut lives, &names[0]).await;
    go_provider_cluster(&env, &mut lives).await;
    orphans::orphans_freed(&env, &mut lives).await;

    // Deleted as Cluster API deletes a cluster: the infrastructure cluster tears its firewall
    // down itself (no foreground deletion does it first).
    let capi_clusters = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    for cluster in [MSC, GO_CLUSTER, "orphans"] {
        capi_clusters
            .delete(cluster, &DeleteParams::default())
            .await
            .expect("delete the Cluster");
    }
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let deployments = env.dynamic(
        GO,
        "MetalStackFirewallDeployment",
        "metalstackfirewalldeployments",
    );
    let freed = || async {
        let now = env.metal_state().await;
        let all_freed =
            now.0.is_empty() && now.1 == initial.1 && now.2.iter().all(|m| m.allocation.is_none());
        let gone = clusters
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
            && deployments
                .list(&Default::default())
                .await
                .is_ok_and(|l| l.items.is_empty());
        all_freed && gone
    };
    lives.until(&env, "deletion", freed).await;

    lives.report(size);
}

/// Provisioning, a firewall rollout, a scale-down and a move of the lab cluster, life after
/// life.
async fn lifecycle(env: &Env, lives: &mut Lives, names: &[String]) {
    let size = names.len();
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": BOOTSTRAP}})).await;
    for name in names {
        env.add_lab_machine(MSC, name, "bootstrap").await;
    }
    // The workers' template: its capacity is written too (a write site of its own).
    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
        "metadata": {"name": "workers"},
        "spec": {"template": {"spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}}}
    }))
    .await;
    let provisioned =
        || async { env.all_ready(names).await && env.template_capacity_known().await };
    lives.until(env, "provisioning", provisioned).await;

    let patch = json!({"spec": {"firewallSpec": {"rules": {"egress": [
        {"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "allow https"},
        {"protocol": "tcp", "ports": [8443], "to": ["0.0.0.0/0"], "comment": "one more"}]}}}});
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    clusters
        .patch(MSC, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("change the firewall rules");
    let rolled = || async {
        let (left, _) = env.firewalls_left().await;
        left.len() == 1 && left[0] != format!("{MSC}-firewall") && env.all_ready(names).await
    };
    lives.until(env, "firewall rollout", rolled).await;

    let gone = names.last().cloned().expect("a worker");
    env.dynamic("cluster.x-k8s.io/v1beta2", "Machine", "machines")
        .delete(&gone, &DeleteParams::default())
        .await
        .expect("scale down");
    let kept = &names[..size - 1];
    let scaled = || async {
        let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
        let msm_gone = machines.get_opt(&gone).await.ok().flatten().is_none();
        msm_gone && env.allocated_machines().await == kept.len() + 1 && env.all_ready(kept).await
    };
    lives.until(env, "scale-down", scaled).await;

    let before_move = env.metal_state().await;
    moved(env).await;
    let back = || async { env.all_ready(kept).await };
    lives.until(env, "after a move", back).await;
    let ids = |state: &(Vec<Network>, Vec<Ip>, Vec<Machine>)| {
        let ids = state.2.iter().filter(|m| m.allocation.is_some());
        ids.map(|m| m.id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&env.metal_state().await),
        ids(&before_move),
        "the move allocated nothing"
    );
}
