//! Every cause of waiting shows as a condition naming it, and clears when the cause does.

use super::*;
#[tokio::test(flavor = "current_thread")]
async fn every_waiting_cause_shows_as_a_condition_and_recovers() {
    let env = Env::start("conditions").await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    without_an_owner_nothing_is_allocated(&env, &clusters).await;
    metal_api_down_shows_and_recovers(&env, &clusters).await;
    an_unknown_private_network_names_the_field_and_the_choices(&env, &clusters).await;
    missing_bootstrap_data_is_waited_for(&env, &machines).await;
    paused_and_back(&machines).await;
    no_machine_available_until_one_is_freed(&env, &machines).await;
}

fn msc_condition(c: &MetalStackCluster, type_: &str, status: &str, reason: &str) -> bool {
    c.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, type_))
        .is_some_and(|x| x.status == status && x.reason == reason)
}

/// No owning Cluster yet.
async fn without_an_owner_nothing_is_allocated(env: &Env, clusters: &Api<MetalStackCluster>) {
    env.apply(fixture("metalstackcluster-initial.yaml")).await;
    wait_condition(clusters, MSC, "WaitingForClusterOwnerRef", |c| {
        msc_condition(c, "Ready", "False", "WaitingForClusterOwnerRef")
    })
    .await;
    assert!(
        env.sim
            .editor()
            .networks()
            .await
            .expect("networks")
            .iter()
            .all(|n| n.parentnetworkid.is_none()),
        "nothing allocated without an owner"
    );
}

/// metal-api answers 503 to everything: the condition says so; it recovers when it comes back.
async fn metal_api_down_shows_and_recovers(env: &Env, clusters: &Api<MetalStackCluster>) {
    env.set_faults(json!({"error_rate": 1.0})).await;
    env.apply(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": MSC},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": MSC}}
    }))
    .await;
    let down = wait_condition(clusters, MSC, "metal-api down", |c| {
        msc_condition(c, "NetworkReady", "False", "MetalServerError")
    })
    .await;
    assert!(!down.status.expect("status").ready);
    env.set_faults(json!({})).await;
    wait_condition(clusters, MSC, "recovery", |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
}

/// A cluster naming a private network metal-api does not have: the condition names the field
/// and the networks that would do.
async fn an_unknown_private_network_names_the_field_and_the_choices(
    env: &Env,
    clusters: &Api<MetalStackCluster>,
) {
    let mut bad = fixture("metalstackcluster-initial.yaml");
    bad["metadata"]["name"] = json!("bad-network");
    bad["spec"]["privateNetworkID"] = json!("nowhere");
    bad["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("firewallSpec");
    env.apply_seed_cluster("bad-network", bad).await;
    let network_message = |c: &MetalStackCluster| {
        c.status
            .as_ref()
            .and_then(|s| condition(&s.conditions, "NetworkReady"))
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    let rejected = wait_condition(
        clusters,
        "bad-network",
        "NetworkReady names the field",
        |c| {
            network_message(c)
                .starts_with("spec.privateNetworkID: network \"nowhere\" does not exist")
        },
    )
    .await;
    assert!(
        network_message(&rejected).contains("valid private networks of the project:"),
        "{}",
        network_message(&rejected)
    );
}

/// A Machine whose bootstrap Secret does not exist yet.
async fn missing_bootstrap_data_is_waited_for(env: &Env, machines: &Api<MetalStackMachine>) {
    env.add_machine(MSC, "worker-a", "worker-a-bootstrap", json!({}))
        .await;
    wait_condition(machines, "worker-a", "WaitingForBootstrapData", |m| {
        msm_condition(m, "Ready", "False", "WaitingForBootstrapData")
    })
    .await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "worker-a-bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    wait_condition(machines, "worker-a", "worker-a ready", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
}

/// Paused by annotation, and back.
async fn paused_and_back(machines: &Api<MetalStackMachine>) {
    let patch = |paused: bool| json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": if paused { json!("") } else { Value::Null }}}});
    machines
        .patch(
            "worker-a",
            &PatchParams::default(),
            &Patch::Merge(&patch(true)),
        )
        .await
        .expect("pause");
    wait_condition(machines, "worker-a", "Paused", |m| {
        msm_condition(m, "Paused", "True", "Paused")
    })
    .await;
    machines
        .patch(
            "worker-a",
            &PatchParams::default(),
            &Patch::Merge(&patch(false)),
        )
        .await
        .expect("unpause");
    wait_condition(machines, "worker-a", "NotPaused", |m| {
        msm_condition(m, "Paused", "False", "NotPaused")
    })
    .await;
}

/// Externally managed objects are left completely alone. The partition has three machines: the
/// firewall's, worker-a's and one more. Of two more workers, one finds none: 422 "no machine
/// available", until worker-a is deleted.
async fn no_machine_available_until_one_is_freed(env: &Env, machines: &Api<MetalStackMachine>) {
    env.add_machine(
        MSC,
        "external",
        "worker-a-bootstrap",
        json!({"cluster.x-k8s.io/managed-by": "someone-else"}),
    )
    .await;
    env.add_machine(MSC, "worker-b", "worker-a-bootstrap", json!({}))
        .await;
    env.add_machine(MSC, "worker-c", "worker-a-bootstrap", json!({}))
        .await;
    let no_machine =
        |m: &MetalStackMachine| msm_condition(m, "MachineAllocated", "False", "NoMachineAvailable");
    let starved = eventually(
        "one worker without a machine",
        Duration::from_secs(60),
        || async {
            for name in ["worker-b", "worker-c"] {
                if machines
                    .get(name)
                    .await
                    .ok()
                    .is_some_and(|m| no_machine(&m))
                {
                    return Some(name);
                }
            }
            None
        },
    )
    .await;
    let waiting = machines.get(starved).await.expect("starved worker");
    assert!(
        waiting
            .status
            .expect("status")
            .conditions
            .iter()
            .any(|c| c.message.contains("no machine available"))
    );
    let external = machines.get("external").await.expect("external");
    assert!(
        external.status.is_none() && external.metadata.finalizers.is_none(),
        "managed-by objects are not touched: {external:?}"
    );

    env.dynamic("cluster.x-k8s.io/v1beta2", "Machine", "machines")
        .delete("worker-a", &DeleteParams::default())
        .await
        .expect("delete");
    wait_condition(
        machines,
        starved,
        "the starved worker gets the freed machine",
        |m| m.status.as_ref().is_some_and(|s| s.ready),
    )
    .await;
    let (_, _, metal_machines) = env.metal_state().await;
    assert_eq!(
        metal_machines
            .iter()
            .filter(|m| m.allocation.is_some())
            .count(),
        3,
        "firewall, worker-b and worker-c"
    );
}
