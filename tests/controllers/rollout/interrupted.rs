//! A rollout interrupted: the serving firewall lost, the cluster paused, moved or deleted while a
//! firewall rolls in. The firewall rolling in is held before it phones home meanwhile.

use super::*;
use crate::looks::{nudge, version_of};
use kube::ResourceExt;

/// A provisioned lab cluster with a firewall rolling in for a new egress rule, held before it
/// phones home; returns its name.
async fn held_mid_rollout(env: &Env) -> String {
    env.hold_phone_home().await;
    env.patch_firewall_spec(egress(8443)).await;
    rolling_in(env).await
}

/// The machine a MetalStackFirewall is allocated to.
async fn machine_of(env: &Env, name: &str) -> String {
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let fw = wait_ready(env, &firewalls, name, |f| {
        f.status.as_ref().is_some_and(|s| s.machine_id.is_some())
    })
    .await;
    fw.status.and_then(|s| s.machine_id).expect("allocated")
}

fn names(firewalls: &[MetalStackFirewall]) -> Vec<String> {
    let mut names: Vec<String> = firewalls.iter().map(ResourceExt::name_any).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serving_firewall_lost_mid_rollout_is_replaced_by_the_one_rolling_in_alone() {
    // A ready firewall's loss changes nothing about it: the periodic look finds it.
    let (env, watch) = provisioned("rollout-lost", &[DEADLINE, "--sync-period=2s"]).await;
    let first = format!("{MSC}-firewall");
    let rolling = held_mid_rollout(&env).await;
    let new_machine = machine_of(&env, &rolling).await;
    // Until the loss, a firewall served throughout.
    watch.never_without_a_firewall().await;

    // As `metalctl firewall rm` would.
    let lost = machine_of(&env, &first).await;
    env.sim
        .editor()
        .machine_free(&lost)
        .await
        .expect("freed outside capms");
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let reported = wait_condition(&firewalls, &first, "MachineLost", |f| {
        let status = f.status.as_ref();
        status
            .and_then(|s| condition(&s.conditions, "Ready"))
            .is_some_and(|c| c.reason == "MachineLost")
    })
    .await;
    // The cluster has seen the loss (its reconcile after the report), then capms looks at both
    // again and again (every 2 s, its sync period) and makes no third firewall.
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let cluster = version_of(&clusters.get(MSC).await.expect("cluster"));
    env.looked("MetalStackCluster", MSC, cluster, 1).await;
    let before = env.actions().await;
    let seen = env.looked("MetalStackCluster", MSC, cluster, 3).await;
    env.looked("MetalStackFirewall", &first, version_of(&reported), 3)
        .await;
    env.did_nothing_since(
        &before,
        &format!("after its serving firewall was lost: {seen:?}"),
    )
    .await;
    let (names, machines) = env.firewalls_left().await;
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(
        machines,
        std::slice::from_ref(&new_machine),
        "only the one rolling in"
    );

    env.release_phone_home().await;
    let serving = rolled_from(&env, &first).await;
    assert_eq!(serving, rolling);
    assert_eq!(machine_of(&env, &serving).await, new_machine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_takes_no_rollout_step_until_it_is_resumed() {
    let (env, watch) = provisioned("rollout-paused", &[DEADLINE]).await;
    let first = format!("{MSC}-firewall");
    pause(&env, true).await;
    env.paused_seen(true).await;
    let before = env.actions().await;
    let changed = env.patch_firewall_spec(egress(8443)).await;
    // capms looked at the changed spec and, paused, took no step.
    let looks = env.looked("MetalStackCluster", MSC, changed, 1).await;
    assert_eq!(looks[0].step, "Nothing", "{looks:?}");
    env.did_nothing_since(&before, "a paused cluster's firewall spec changed")
        .await;
    assert_eq!(
        env.firewalls_left().await.0,
        std::slice::from_ref(&first),
        "no firewall rolls in"
    );

    // Resumed, the rollout starts; paused again mid-way, the serving firewall is kept even
    // though the new one becomes ready.
    env.hold_phone_home().await;
    pause(&env, false).await;
    let rolling = rolling_in(&env).await;
    pause(&env, true).await;
    env.paused_seen(true).await;
    let rolling_machine = machine_of(&env, &rolling).await;
    let before = env.actions().await;
    env.release_phone_home().await;
    env.phoned_home(&rolling_machine).await;
    // Once the new firewall has phoned home, capms looks at the cluster and both firewalls
    // again and takes no step.
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    for (kind, name, version) in [
        (
            "MetalStackCluster",
            MSC.to_owned(),
            nudge(&clusters, MSC).await,
        ),
        (
            "MetalStackFirewall",
            first.clone(),
            nudge(&firewalls, &first).await,
        ),
        (
            "MetalStackFirewall",
            rolling.clone(),
            nudge(&firewalls, &rolling).await,
        ),
    ] {
        let looks = env.looked(kind, &name, version, 1).await;
        assert_eq!(looks[0].step, "Nothing", "{looks:?}");
    }
    env.did_nothing_since(&before, "a paused cluster's firewall phoned home")
        .await;
    let (left, machines) = env.firewalls_left().await;
    assert_eq!(left.len(), 2, "both firewalls kept while paused: {left:?}");
    assert_eq!(machines.len(), 2, "{machines:?}");
    // kubectl shows which is which.
    let table =
        ControlPlane::shared().kubectl(&["get", "metalstackfirewalls", "-n", &env.ns.name], &[]);
    let role_of = |name: &str| {
        let row = table.lines().find(|l| l.starts_with(&format!("{name} ")));
        row.and_then(|r| r.split_whitespace().nth(2))
            .map(str::to_owned)
    };
    assert_eq!(role_of(&first).as_deref(), Some("Serving"), "{table}");
    assert_eq!(role_of(&rolling).as_deref(), Some("RollingIn"), "{table}");

    pause(&env, false).await;
    assert_eq!(rolled_from(&env, &first).await, rolling);
    watch.never_without_a_firewall().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_cluster_mid_rollout_frees_both_firewalls() {
    let (env, watch) = provisioned("rollout-deleted", &[DEADLINE]).await;
    held_mid_rollout(&env).await;
    watch.never_without_a_firewall().await;
    let cluster_api = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    cluster_api
        .delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete the Cluster");
    eventually(
        "the Cluster gone and metal-api holding nothing of it",
        Duration::from_secs(180),
        || async {
            let gone = cluster_api.get_opt(MSC).await.ok()?.is_none();
            let (names, machines) = env.firewalls_left().await;
            let (networks, _, _) = env.metal_state().await;
            (gone && names.is_empty() && machines.is_empty() && networks.is_empty()).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_moved_mid_rollout_resumes_it_on_the_target() {
    let (env, watch) = provisioned("rollout-moved", &[DEADLINE]).await;
    let first = format!("{MSC}-firewall");
    let rolling = held_mid_rollout(&env).await;
    let new_machine = machine_of(&env, &rolling).await;

    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let before = firewalls
        .list(&Default::default())
        .await
        .expect("firewalls");
    assert_eq!(names(&before.items), [first.clone(), rolling.clone()]);
    moved(&env).await;

    env.release_phone_home().await;
    let serving = rolled_from(&env, &first).await;
    assert_eq!(serving, rolling);
    assert_eq!(
        machine_of(&env, &serving).await,
        new_machine,
        "the firewall rolling in before the move serves, on its machine"
    );
    watch.never_without_a_firewall().await;
}
