//! The orphan sweep: what a leak leaves in metal-api (an allocation carrying capms's owner marks
//! of an object that is gone) is freed and reported, and nothing else is: not what metal-stack's
//! Go provider allocated, not what belongs to a cluster capms does not manage, not what a paused
//! cluster, a cluster being moved by clusterctl or a cluster being restored holds, nor a machine
//! its cluster records as retired.

use super::looks::version_of;
use super::moving::{moved_away, moved_back, pause, re_created};
use super::*;
use capms::ownership::{OwnerKind, owner_marks, owner_tags, retired_annotation};

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

/// A test's environment with capms sweeping every second, freeing what has been orphaned for
/// `grace`, and machines to spare for the planted ones.
async fn sweeping(prefix: &str, grace: &str) -> Env {
    let mut env = Env::with_inventory(prefix, super::crash_points::inventory(6)).await;
    let grace = format!("--orphan-grace={grace}");
    env.start_capms(&["--orphan-sweep-interval=1s", &grace]);
    env
}

/// A provisioned lab cluster with worker `worker-o`; its private network.
async fn provisioned(env: &Env) -> String {
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker-o", "bootstrap").await;
    eventually(
        "the cluster and its worker ready",
        support::LOADED_MACHINE_WAIT,
        || async { env.all_ready(&["worker-o".to_owned()]).await.then_some(()) },
    )
    .await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let msc = clusters.get(MSC).await.expect("cluster");
    msc.status.and_then(|s| s.network_id).expect("network")
}

/// A machine allocated behind capms's back, in `network`, with `tags`: its id.
pub(super) fn allocated(env: &Env, network: &str, tags: Vec<String>) -> String {
    let request = planted(network, tags);
    let mut state = env.sim.sim.state();
    let machine = state.machine_allocate(&request, None, "machine", "capms");
    machine.expect("allocated").id
}

/// The request of a machine allocated behind capms's back, in `network`, with `tags`.
pub(super) fn planted(network: &str, tags: Vec<String>) -> MachineAllocateRequest {
    MachineAllocateRequest {
        name: "planted".into(),
        hostname: "planted".into(),
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: "ubuntu-26.4".into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.into(),
            autoacquire: Some(true),
        }]),
        tags,
        ..Default::default()
    }
}

/// The tags capms puts on a machine of MetalStackMachine `namespace/name` in cluster `cluster`
/// (`<ns>.<msc>`); `uid` false: as metal-stack's Go provider marks them, by name alone.
pub(super) fn marks(namespace: &str, name: &str, cluster: &str, uid: bool) -> Vec<String> {
    let mut tags = owner_tags(&owner_marks(
        OwnerKind::Machine,
        namespace,
        name,
        "uid-gone",
    ));
    tags.retain(|t| uid || !t.contains("-uid="));
    tags.push(format!("cluster.metal-stack.io/id={cluster}"));
    tags
}

fn is_allocated(env: &Env, id: &str) -> bool {
    let machine = env.sim.sim.state().machine(id);
    machine.is_ok_and(|m| m.allocation.is_some())
}

impl Env {
    /// The sweeps capms has made (its metrics).
    async fn sweeps(&self) -> u64 {
        let port = self.metrics_port.expect("metrics");
        let text = support::activity::metrics(port).await.expect("metrics");
        support::activity::total(&text, "capms_orphan_sweeps_total", |_| true)
    }

    /// Waits until capms has swept `more` times after `since` sweeps.
    async fn swept(&self, since: u64, more: u64) -> u64 {
        let what = format!("{more} orphan sweeps after {since}");
        eventually(&what, support::LOADED_MACHINE_WAIT, || async {
            let now = self.sweeps().await;
            (now >= since + more).then_some(now)
        })
        .await
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_orphan_of_a_managed_cluster_is_freed_and_reported_and_nothing_else_is() {
    let env = sweeping("orphans", "3s").await;
    let network = provisioned(&env).await;
    let ns = env.ns.name.clone();
    let cluster = format!("{ns}.{MSC}");
    let before = env.allocated_machines().await;
    let orphan = allocated(&env, &network, marks(&ns, "gone", &cluster, true));
    let spared = [
        // metal-stack's Go provider's: not capms's to free.
        allocated(&env, &network, marks(&ns, "gone-go", &cluster, false)),
        // Of a cluster capms does not manage.
        allocated(
            &env,
            &network,
            marks(&ns, "gone-elsewhere", &format!("{ns}.elsewhere"), true),
        ),
        // Of an object in another namespace than its cluster's.
        allocated(&env, &network, marks("other", "gone", &cluster, true)),
    ];
    eventually("the orphan freed", support::LOADED_MACHINE_WAIT, || async {
        (!is_allocated(&env, &orphan)).then_some(())
    })
    .await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    for id in &spared {
        assert!(is_allocated(&env, id), "machine {id} was freed");
    }
    assert_eq!(
        env.allocated_machines().await,
        before + spared.len(),
        "the cluster's own stay"
    );
    let events = env
        .dynamic("events.k8s.io/v1", "Event", "events")
        .list(&Default::default())
        .await
        .expect("events");
    let reported: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.data["reason"] == "OrphanFreed")
        .map(|e| e.data["note"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].contains(&orphan) && reported[0].contains("gone"),
        "{reported:?}"
    );
    let port = env.metrics_port.expect("metrics");
    let metrics = support::activity::metrics(port).await.expect("metrics");
    assert!(
        metrics.contains("capms_orphans_freed_total{what=\"machine\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_paused_cluster_and_a_cluster_moved_away_and_back_keep_everything() {
    // No grace at all: only the pause keeps the sweep's hands off.
    let env = sweeping("orphans-moved", "0s").await;
    let network = provisioned(&env).await;
    let ns = env.ns.name.clone();
    pause(&env, true).await;
    env.paused_seen(true).await;
    let orphan = allocated(
        &env,
        &network,
        marks(&ns, "gone", &format!("{ns}.{MSC}"), true),
    );
    let held = env.metal_state().await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    assert!(is_allocated(&env, &orphan), "freed while paused");

    // clusterctl move, half way: the moved objects are gone from the source (finalizers
    // stripped), the Cluster still paused.
    let saved = moved_away(&env).await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    assert_eq!(env.metal_state().await, held, "freed while being moved");

    // The target's objects come (here, back), the Cluster resumes: the orphan goes, nothing else.
    moved_back(&env, &saved).await;
    eventually("the orphan freed", support::LOADED_MACHINE_WAIT, || async {
        (!is_allocated(&env, &orphan)).then_some(())
    })
    .await;
    let now = env.metal_state().await;
    let ids = |s: &(Vec<Network>, Vec<Ip>, Vec<Machine>)| {
        let allocated =
            s.2.iter()
                .filter(|m| m.allocation.is_some() && m.id != orphan);
        (
            s.0.len(),
            s.1.len(),
            allocated.map(|m| m.id.clone()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(ids(&now), ids(&held), "only the orphan was freed");
}

#[tokio::test(flavor = "current_thread")]
async fn objects_restored_within_the_grace_period_keep_everything() {
    // The default grace: on a loaded machine the restore may follow the deletion by minutes,
    // and a grace that ended before it would free what the restore brings back.
    let env = sweeping("orphans-restored", "10m").await;
    provisioned(&env).await;
    let ns = env.ns.name.clone();
    let held = env.metal_state().await;
    // As a restore leaves them: gone (here, their finalizers stripped), then back from a backup
    // one after another, without a pause.
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &ns);
    let saved = machines.get("worker-o").await.expect("worker");
    gone_without_teardown(&machines, "worker-o").await;
    eventually("the worker gone", support::LOADED_MACHINE_WAIT, || async {
        machines
            .get_opt("worker-o")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    env.apply(re_created(&saved, None)).await;
    let back = machines.get("worker-o").await.expect("restored");
    env.looked("MetalStackMachine", "worker-o", version_of(&back), 1)
        .await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    assert_eq!(
        env.metal_state().await,
        held,
        "nothing freed, nothing allocated"
    );
}

/// Has MetalStackMachine `name` go without capms's teardown: its finalizers stripped, then
/// deleted at that very version. capms puts its finalizer back on a live object it has taken
/// up, so a deletion after capms did so (a conflict here) would free the machine; strip again.
async fn gone_without_teardown(machines: &Api<MetalStackMachine>, name: &str) {
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for _ in 0..20 {
        let stripped = machines
            .patch(name, &PatchParams::default(), &strip)
            .await
            .expect("strip");
        let at = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: stripped.metadata.resource_version,
                uid: None,
            }),
            ..Default::default()
        };
        match machines.delete(name, &at).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("delete {name}: {e}"),
        }
    }
    panic!("{name}: capms put its finalizer back before each of 20 deletions");
}

/// Records (or with `None` takes off) machine `id` as retired on the lab cluster.
async fn record_retired(env: &Env, id: &str, why: Option<&str>) {
    let key = retired_annotation(id).expect("a machine ID names an annotation");
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let patch = Patch::Merge(json!({"metadata": {"annotations": {key: why}}}));
    clusters
        .patch(MSC, &PatchParams::default(), &patch)
        .await
        .expect("record the retired machine");
}

/// Deletes MetalStackMachine `name` and waits until capms let it go.
async fn deleted(machines: &Api<MetalStackMachine>, name: &str) {
    machines
        .delete(name, &Default::default())
        .await
        .expect("delete");
    let gone = || async { machines.get_opt(name).await.ok()?.is_none().then_some(()) };
    eventually(
        "the MetalStackMachine gone",
        support::LOADED_MACHINE_WAIT,
        gone,
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_retired_machine_outlives_its_machine_and_the_sweep_until_taken_off_or_the_cluster_goes()
{
    let env = sweeping("orphans-retired", "1s").await;
    provisioned(&env).await;
    let msm: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let id = env.machine_of("worker-o").await;
    record_retired(&env, &id, Some("given up by its remediation")).await;
    deleted(&msm, "worker-o").await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    assert!(
        is_allocated(&env, &id),
        "freed with its MetalStackMachine or by the sweep"
    );
    record_retired(&env, &id, None).await;
    eventually(
        "freed once off the record",
        support::LOADED_MACHINE_WAIT,
        || async { (!is_allocated(&env, &id)).then_some(()) },
    )
    .await;

    // Retired again, on a new worker: the cluster's deletion frees it.
    env.add_lab_machine(MSC, "worker-p", "bootstrap").await;
    eventually(
        "the new worker ready",
        support::LOADED_MACHINE_WAIT,
        || async { env.all_ready(&["worker-p".to_owned()]).await.then_some(()) },
    )
    .await;
    let id = env.machine_of("worker-p").await;
    record_retired(&env, &id, Some("given up by its remediation")).await;
    deleted(&msm, "worker-p").await;
    let sweeps = env.sweeps().await;
    env.swept(sweeps, 3).await;
    assert!(is_allocated(&env, &id), "freed before the cluster went");
    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .delete(MSC, &DeleteParams::default())
        .await
        .expect("delete the Cluster");
    eventually("everything freed", support::LOADED_MACHINE_WAIT, || async {
        let (networks, ips, machines) = env.metal_state().await;
        let freed = networks.is_empty() && machines.iter().all(|m| m.allocation.is_none());
        (freed
            && ips
                .iter()
                .all(|ip| ip.name != format!("{MSC}-control-plane")))
        .then_some(())
    })
    .await;
}
