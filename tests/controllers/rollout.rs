//! Rolling the firewall against the real apiserver and the simulator. Throughout each rollout a
//! watcher looks at metal-api's state every 50 ms (on average at least every 200 ms, as asked,
//! and never more than a second apart) for an allocated firewall that has phoned home and is
//! alive in the cluster's private network; once provisioned, the cluster is never without one.

use super::*;
use capms::api::RolloutPhase;
use metal_api::types::MachineHealth;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

mod changes;
mod interrupted;

/// The watcher: a thread of its own reading the simulator's state directly, so that neither the
/// test's blocking calls (kubectl, starting and killing processes) nor a busy runtime pause it
/// unnoticed.
struct FirewallWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Looks>,
}

/// What the watcher saw.
#[derive(Debug, Default)]
struct Looks {
    /// The moments metal-api showed no ready firewall in the network.
    gaps: Vec<String>,
    count: u32,
    /// The longest time between two looks, and the time from the first to the last.
    longest: Duration,
    span: Duration,
}

impl FirewallWatch {
    fn start(env: &Env, network: String) -> FirewallWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let sim = env.sim.sim.clone();
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut looks = Looks::default();
            let (first, mut last) = (Instant::now(), Instant::now());
            while !stopped.load(Ordering::SeqCst) {
                let machines = sim.state().machine_find(&Default::default());
                let serving = machines.iter().any(|m| {
                    m.allocation.as_ref().is_some_and(|a| {
                        a.role == "firewall" && a.networks.iter().any(|n| n.networkid == network)
                    }) && m.health() == MachineHealth::Ready
                });
                let now = Instant::now();
                if !serving {
                    looks.gaps.push(format!(
                        "after {:?}: {} machines",
                        now - first,
                        machines.len()
                    ));
                }
                (looks.longest, looks.span) = (looks.longest.max(now - last), now - first);
                last = now;
                looks.count += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            looks
        });
        FirewallWatch { stop, thread }
    }

    async fn never_without_a_firewall(self) {
        self.stop.store(true, Ordering::SeqCst);
        let looks = self.thread.join().expect("watcher");
        // A whole rollout spans a few dozen looks (the simulator installs a firewall in about a
        // second); a rollout interrupted once a firewall rolls in, a few.
        assert!(looks.count >= 3, "the watcher looked too little: {looks:?}");
        assert!(
            looks.span / looks.count <= Duration::from_millis(200)
                && looks.longest <= Duration::from_secs(1),
            "the watcher did not look often enough: {looks:?}"
        );
        assert!(
            looks.gaps.is_empty(),
            "no ready firewall in the network at {} of {} looks: {:?}",
            looks.gaps.len(),
            looks.count,
            looks.gaps
        );
    }
}

/// The lab with a newer firewall image, firewall-ubuntu-3.1, and a second size, v1-medium-x86,
/// of two machines.
fn rollout_lab() -> Inventory {
    let mut lab = Inventory::default_lab();
    lab.images.push(metal_sim::inventory::ImageSpec {
        id: "firewall-ubuntu-3.1".into(),
        name: "Firewall 3.1 Ubuntu".into(),
        features: vec!["firewall".into()],
    });
    let mut medium = lab.sizes[0].clone();
    medium.id = MEDIUM.into();
    medium.name = MEDIUM.into();
    lab.sizes.push(medium);
    for n in 7..=8 {
        let mut machine = lab.machines[0].clone();
        machine.id = format!("00000000-0000-0000-0000-00000000000{n}");
        machine.size = MEDIUM.into();
        lab.machines.push(machine);
    }
    lab
}

const MEDIUM: &str = "v1-medium-x86";

/// capms's rollout deadline in the tests whose firewalls become ready.
const DEADLINE: &str = "--firewall-rollout-deadline=20m";

/// A provisioned lab cluster, capms started with `args`, and the watcher started.
async fn provisioned(prefix: &str, args: &[&str]) -> (Env, FirewallWatch) {
    let mut env = Env::with_inventory(prefix, rollout_lab()).await;
    env.start_capms(args);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let msc = wait_stable(&env, &clusters, |_| true).await;
    let network = msc.status.and_then(|s| s.network_id).expect("network");
    let watch = FirewallWatch::start(&env, network);
    (env, watch)
}

/// Waits until the rollout is stable and `done` holds for the cluster.
async fn wait_stable(
    env: &Env,
    clusters: &Api<MetalStackCluster>,
    done: impl Fn(&MetalStackCluster) -> bool,
) -> MetalStackCluster {
    let found = tokio::time::timeout(
        Duration::from_secs(240),
        eventually(
            "the firewall rollout to be stable",
            Duration::from_secs(240),
            || async {
                let c = clusters.get(MSC).await.ok()?;
                let status = c.status.as_ref()?;
                let rollout = status.firewall.as_ref()?;
                let rolled = condition(&status.conditions, "FirewallRolledOut")
                    .is_some_and(|c| c.status == "True");
                (status.ready && rollout.phase == RolloutPhase::Stable && rolled && done(&c))
                    .then_some(c)
            },
        ),
    )
    .await;
    found.unwrap_or_else(|_| panic!("no stable rollout; capms log:\n{}", env.capms_log()))
}

impl Env {
    /// From now on every free machine stops before it phones home: a firewall rolling in stays
    /// not ready until [`Env::release_phone_home`].
    async fn hold_phone_home(&self) {
        let (_, _, machines) = self.metal_state().await;
        let free: Vec<&str> = machines
            .iter()
            .filter(|m| m.allocation.is_none())
            .map(|m| m.id.as_str())
            .collect();
        self.set_faults(json!({"never_phone_home": free})).await;
    }

    async fn release_phone_home(&self) {
        self.set_faults(json!({})).await;
    }

    /// Patches the cluster's firewall spec; its resourceVersion after.
    async fn patch_firewall_spec(&self, patch: Value) -> u64 {
        let clusters: Api<MetalStackCluster> = Api::namespaced(self.client(), &self.ns.name);
        let patch = json!({"spec": {"firewallSpec": patch}});
        let patched = clusters
            .patch(MSC, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch the firewall spec");
        crate::looks::version_of(&patched)
    }

    /// The MetalStackFirewalls left, and the firewall machines allocated in metal-api.
    pub(crate) async fn firewalls_left(&self) -> (Vec<String>, Vec<String>) {
        let firewalls: Api<MetalStackFirewall> = Api::namespaced(self.client(), &self.ns.name);
        let names = firewalls
            .list(&Default::default())
            .await
            .expect("firewalls");
        let names = names
            .items
            .iter()
            .map(|f| f.metadata.name.clone().unwrap_or_default());
        let (_, _, machines) = self.metal_state().await;
        let allocated = machines
            .iter()
            .filter(|m| m.allocation.as_ref().is_some_and(|a| a.role == "firewall"));
        (names.collect(), allocated.map(|m| m.id.clone()).collect())
    }
}

/// Patches the firewall spec with `patch` and waits until a firewall other than `before` serves
/// alone; returns its name.
async fn rolled_to(env: &Env, patch: Value, before: &str) -> String {
    env.patch_firewall_spec(patch).await;
    rolled_from(env, before).await
}

/// Waits until a firewall other than `before` serves alone; returns its name.
async fn rolled_from(env: &Env, before: &str) -> String {
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let rolled = wait_stable(env, &clusters, |c| {
        serving_of(c).is_some_and(|s| s != before)
    })
    .await;
    let serving = serving_of(&rolled).expect("serving");
    the_old_firewall_is_freed(env, &serving).await;
    serving
}

fn serving_of(c: &MetalStackCluster) -> Option<String> {
    c.status.as_ref()?.firewall.as_ref()?.serving.clone()
}

/// Only `serving` is left, in Kubernetes and in metal-api.
async fn the_old_firewall_is_freed(env: &Env, serving: &str) {
    eventually(
        "the old firewall to be freed",
        Duration::from_secs(120),
        || async {
            let (names, machines) = env.firewalls_left().await;
            (names == [serving] && machines.len() == 1).then_some(())
        },
    )
    .await;
}

fn egress(port: u16) -> Value {
    json!({"rules": {"egress": [
        {"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "allow https"},
        {"protocol": "tcp", "ports": [port], "to": ["0.0.0.0/0"], "comment": "one more"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_change_and_then_an_image_change_roll_the_firewall_without_a_gap() {
    let (env, watch) = provisioned("rollout", &[DEADLINE]).await;
    let first = format!("{MSC}-firewall");
    let serving = rolled_to(&env, egress(8443), &first).await;
    rolled_to(&env, json!({"image": "firewall-ubuntu-3.1"}), &serving).await;
    watch.never_without_a_firewall().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firewall_that_never_becomes_ready_is_freed_and_the_old_one_serves_on() {
    let (env, watch) = provisioned("rollout-fails", &["--firewall-rollout-deadline=15s"]).await;
    // Every free machine boots in a loop from now on.
    let (_, _, machines) = env.metal_state().await;
    let free: Vec<String> = machines
        .iter()
        .filter(|m| m.allocation.is_none())
        .map(|m| m.id.clone())
        .collect();
    env.set_faults(json!({"crash_loop": free})).await;
    env.patch_firewall_spec(egress(8443)).await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let failed = eventually("the rollout to fail", Duration::from_secs(180), || async {
        let c = clusters.get(MSC).await.ok()?;
        let rollout = c.status.as_ref()?.firewall.clone()?;
        (rollout.phase == RolloutPhase::Failed && rollout.failed_attempts >= 1).then_some(c)
    })
    .await;
    let status = failed.status.expect("status");
    assert!(status.ready, "the cluster stays ready");
    let rollout = status.firewall.expect("rollout");
    assert_eq!(
        rollout.serving.as_deref(),
        Some(format!("{MSC}-firewall").as_str())
    );
    let reason = condition(&status.conditions, "FirewallRolledOut").map(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("RolloutFailed"));
    the_old_firewall_is_freed(&env, &format!("{MSC}-firewall")).await;
    watch.never_without_a_firewall().await;
}

/// Waits until a firewall rolls in beside the serving one; returns its name.
async fn rolling_in(env: &Env) -> String {
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    eventually(
        "a firewall to roll in",
        Duration::from_secs(120),
        || async {
            let c = clusters.get(MSC).await.ok()?;
            let rollout = c.status?.firewall?;
            (rollout.phase == RolloutPhase::RollingOut)
                .then_some(rollout.rolling_in)
                .flatten()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_further_change_supersedes_the_firewall_rolling_in() {
    let (env, watch) = provisioned("rollout-supersede", &[DEADLINE]).await;
    env.patch_firewall_spec(egress(8443)).await;
    let superseded = rolling_in(&env).await;
    let serving = rolled_to(&env, egress(9443), &format!("{MSC}-firewall")).await;
    assert_ne!(serving, superseded, "the last spec's firewall serves");
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let last = firewalls.get(&serving).await.expect("the serving firewall");
    let rules = last.spec.rules.expect("rules");
    assert!(
        rules.egress.iter().any(|r| r.ports.contains(&9443)),
        "{rules:?}"
    );
    watch.never_without_a_firewall().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capms_killed_mid_rollout_resumes_it_without_a_second_firewall() {
    let (mut env, watch) = provisioned("rollout-killed", &[DEADLINE]).await;
    env.patch_firewall_spec(egress(8443)).await;
    let rolling = rolling_in(&env).await;
    // SIGKILL, as a crash or an evicted pod ends capms.
    drop(env.capms.take());
    env.start_capms(&[DEADLINE]);
    let serving = wait_stable(&env, &Api::namespaced(env.client(), &env.ns.name), |c| {
        c.status
            .as_ref()
            .and_then(|s| s.firewall.as_ref()?.serving.as_deref())
            == Some(&rolling)
    })
    .await;
    assert!(serving.status.is_some());
    the_old_firewall_is_freed(&env, &rolling).await;
    watch.never_without_a_firewall().await;
}
