//! The crash points of a cluster on metal-apiserver (API v2): its MetalStackCluster names
//! credentials of v2, and it goes through provisioning, a firewall rollout, a scale-down, a move
//! and the deletion life after life, each life killed at a point no life of the phase died at,
//! as in the v1 run, with the same judgement after every kill. Its project token lives three
//! minutes (refreshed in its second half): lives refresh it while others are killed around them,
//! each picking up the token the last one wrote back, and the run ends on a token none of them
//! started with, though lives starting one after another spend the token's calls per minute
//! (the simulator's limit is metal-apiserver's default) and wait for the next minute.

use super::*;

/// The phases a cluster on API v2 goes through.
const PHASES: [&str; 5] = [
    "provisioning",
    "firewall rollout",
    "scale-down",
    "after a move",
    "deletion",
];

#[tokio::test(flavor = "current_thread")]
async fn capms_killed_around_each_of_its_calls_through_api_v2_never_allocates_twice_nor_leaks() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: a release build of capms has no crash points");
        return;
    }
    let size = workers();
    let mut env = Env::with_inventory("crash-points-v2", inventory(size)).await;
    let initial = env.metal_state().await;
    let first = env.use_api_v2(Some("180s")).await;
    // No orphans phase: the sweep at its default interval, not every second (each sweep is a
    // listing, and the token's calls per minute are few).
    let mut lives = Lives::of(&env, Vec::new());
    let names: Vec<String> = (0..size).map(|i| format!("worker-{i}")).collect();
    lifecycle(&env, &mut lives, &names).await;

    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .delete(MSC, &DeleteParams::default())
        .await
        .expect("delete the Cluster");
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let freed = || async {
        let now = env.metal_state().await;
        let all_freed =
            now.0.is_empty() && now.1 == initial.1 && now.2.iter().all(|m| m.allocation.is_none());
        let gone = clusters.list(&Default::default()).await;
        all_freed && gone.is_ok_and(|l| l.items.is_empty())
    };
    lives.until(&env, "deletion", freed).await;

    let (_, distinct) = lives.judged(size, &PHASES, " over API v2");
    assert!(distinct > 0, "no kill");
    let report = env.sim.sim.stats().report();
    let v2 = report
        .requests
        .iter()
        .filter(|r| r.route.starts_with("/metalstack.api.v2."));
    let (mut calls, mut exhausted, mut refreshed) = (0, 0, 0);
    for r in v2 {
        calls += r.count;
        exhausted += if r.status == 429 { r.count } else { 0 };
        let refresh = r.route.ends_with("TokenService/Refresh") && r.status == 200;
        refreshed += if refresh { r.count } else { 0 };
    }
    eprintln!(
        "through API v2: {calls} calls, {exhausted} answered resource_exhausted, {refreshed} token refreshes"
    );
    assert!(calls > 0, "nothing called through API v2");
    let last = env.v2_token().await.expect("the Secret's token");
    assert_ne!(last, first.secret, "the token was never refreshed");
    assert!(refreshed > 0, "no refresh through TokenService/Refresh");
}
