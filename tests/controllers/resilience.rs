//! Crashes, leader hand-over and refused status writes never allocate anything twice.

use super::crash_points::nothing_twice_nothing_unowned;
use super::looks::version_of;
use super::*;

async fn reconcile_count(metrics_port: u16) -> Option<u64> {
    let text = support::activity::metrics(metrics_port).await?;
    Some(support::activity::total(
        &text,
        "capms_reconcile_total",
        |_| true,
    ))
}

#[tokio::test(flavor = "current_thread")]
async fn only_the_leader_reconciles_and_killing_it_hands_over() {
    capms::tls::install_default_provider();
    let env = Env::without_capms("leader").await;
    let ports = [free_port(), free_port()];
    let election = [
        "--leader-elect",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let spawn = |i: usize| env.spawn_capms(&format!("capms-{i}"), &election, ports[i]);
    let mut managers = [Some(spawn(0)), Some(spawn(1))];
    env.apply_seed_cluster(MSC, fixture("metalstackcluster-initial.yaml"))
        .await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client(), &env.ns.name);
    let holder = |lease: &k8s_openapi::api::coordination::v1::Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let lease = leases.get("capms-controller-leader").await.expect("lease");
    let leader_pid = holder(&lease)
        .rsplit('-')
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .expect("identity ends with the pid");
    let leader = managers
        .iter()
        .position(|m| m.as_ref().is_some_and(|m| m.pid() == leader_pid))
        .expect("one of ours leads");
    let standby = 1 - leader;
    assert!(
        reconcile_count(ports[leader]).await.unwrap_or(0) > 0,
        "the leader reconciles"
    );
    assert_eq!(
        reconcile_count(ports[standby]).await,
        Some(0),
        "the standby serves metrics but does not reconcile"
    );

    // Kill the leader; the standby takes the lease over and reconciles new work.
    let killed = managers[leader].as_ref().expect("leader").pid();
    drop(managers[leader].take());
    assert!(
        !std::path::Path::new(&format!("/proc/{killed}")).exists(),
        "leader {killed} is gone"
    );
    let standby_pid = managers[standby].as_ref().expect("standby").pid();
    eventually(
        "the standby to take the lease over",
        Duration::from_secs(20),
        || async {
            let lease = leases.get("capms-controller-leader").await.ok()?;
            holder(&lease)
                .ends_with(&format!("-{standby_pid}"))
                .then_some(())
        },
    )
    .await;
    env.apply_seed_machine(MSC).await;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &machines, MSM, |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert!(
        reconcile_count(ports[standby]).await.unwrap_or(0) > 0,
        "the new leader reconciles"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn dropped_status_writes_never_allocate_twice_and_the_shipped_rbac_suffices() {
    let mut env = Env::with_inventory("nostatus", Inventory::default_lab()).await;
    let cp = ControlPlane::shared();
    let full = format!("capms-full-{}", env.ns.name);
    let blind = format!("capms-blind-{}", env.ns.name);
    bind_user(&env, &full, shipped_cluster_role(&full, true)).await;
    bind_user(&env, &blind, shipped_cluster_role(&blind, false)).await;
    let full_kubeconfig = cp.user_kubeconfig(&full, env.work.path());
    let blind_kubeconfig = cp.user_kubeconfig(&blind, env.work.path());

    // Phase 1: every status write is refused (403). Network, IP and firewall are still found
    // again by their owner tags on every retry.
    env.kubeconfig = Some(blind_kubeconfig.clone());
    env.start_capms(&[]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    wait_allocated(&env, 1, "the firewall allocated without any status write").await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let msc = clusters.get(MSC).await.expect("msc");
    assert!(msc.status.is_none(), "status writes were dropped");
    // capms looks at the cluster again and again (each failed status write is retried).
    env.looked("MetalStackCluster", MSC, version_of(&msc), 3)
        .await;
    let (networks, ips, machines) = env.metal_state().await;
    assert_eq!(networks.len(), 1, "{networks:?}");
    assert_eq!(
        ips.iter()
            .filter(|ip| ip.name.ends_with("-control-plane"))
            .count(),
        1,
        "{ips:?}"
    );
    assert_eq!(
        allocated(&machines),
        1,
        "still one firewall after repeated reconciles"
    );

    // Phase 2: capms with the shipped ClusterRole finishes the job.
    drop(env.capms.take());
    env.kubeconfig = Some(full_kubeconfig.clone());
    env.start_capms(&[]);
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // Phase 3: a worker while status writes are refused again, then the shipped role again.
    drop(env.capms.take());
    env.kubeconfig = Some(blind_kubeconfig);
    env.start_capms(&[]);
    env.add_lab_machine(MSC, "worker-z", "bootstrap").await;
    wait_allocated(&env, 2, "worker-z allocated without any status write").await;
    let workers: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let worker = workers.get("worker-z").await.expect("worker-z");
    env.looked("MetalStackMachine", "worker-z", version_of(&worker), 3)
        .await;
    let state = env.metal_state().await;
    assert_eq!(allocated(&state.2), 2, "one firewall, one worker");
    nothing_twice_nothing_unowned(&state, "refused status writes");
    drop(env.capms.take());
    env.kubeconfig = Some(full_kubeconfig);
    env.start_capms(&[]);
    wait_ready(&env, &workers, "worker-z", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let state = env.metal_state().await;
    assert_eq!(allocated(&state.2), 2);
    nothing_twice_nothing_unowned(&state, "refused status writes");
}

#[tokio::test(flavor = "current_thread")]
async fn a_machine_freed_behind_capms_back_is_reported_not_replaced() {
    let mut env = Env::with_inventory("lost", Inventory::default_lab()).await;
    // Nothing about a ready machine changes when it is freed behind capms's back: the periodic
    // look finds it.
    env.start_capms(&["--sync-period=2s"]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker-l", "bootstrap").await;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let ready = wait_ready(&env, &machines, "worker-l", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let provider_id = ready.spec.provider_id.expect("named");
    let machine_id = provider_id.rsplit('/').next().expect("id");
    let before = allocated(&env.metal_state().await.2);

    // As `metalctl machine rm` would.
    env.sim
        .editor()
        .machine_free(machine_id)
        .await
        .expect("freed outside capms");
    let lost = wait_condition(&machines, "worker-l", "MachineLost", |m| {
        msm_condition(m, "Ready", "False", "MachineLost")
    })
    .await;
    let reported = version_of(&lost);
    let status = lost.status.expect("status");
    assert_eq!(status.failure_reason.as_deref(), Some("UpdateError"));
    // capms looks at it again and again (every 2 s, its sync period) and allocates nothing.
    let actions = env.actions().await;
    env.looked("MetalStackMachine", "worker-l", reported, 3)
        .await;
    env.did_nothing_since(&actions, "after a machine was freed behind its back")
        .await;
    assert_eq!(
        allocated(&env.metal_state().await.2),
        before - 1,
        "nothing allocated in its place"
    );
}

fn allocated(machines: &[Machine]) -> usize {
    machines.iter().filter(|m| m.allocation.is_some()).count()
}

/// Waits until `count` machines are allocated in the simulator.
async fn wait_allocated(env: &Env, count: usize, what: &str) {
    eventually(what, Duration::from_secs(60), || async {
        let (_, _, machines) = env.metal_state().await;
        (allocated(&machines) == count).then_some(())
    })
    .await;
}
