//! A new replica waits while its MachineSet is still creating its siblings, and goes on once
//! the MachineSet reports them all; a machine of no MachineSet never waits. Real Cluster API
//! core: its MachineSet controller reports the replicas, its Machine controller owns the
//! MetalStackMachines.

use super::*;
use capms::capi::MachineSet;
use kube::ResourceExt;

const SET: &str = "workers";

/// A MachineSet wanting `replicas` that creates none itself (Cluster API's
/// disable-machine-create annotation), so it counts only the Machine the test makes.
fn machine_set(replicas: u32) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": SET, "annotations": {"cluster.x-k8s.io/disable-machine-create": "true"}},
        "spec": {
            "clusterName": MSC, "replicas": replicas,
            "selector": {"matchLabels": {"set": SET}},
            "template": {
                "metadata": {"labels": {"set": SET}},
                "spec": {"clusterName": MSC, "bootstrap": {"dataSecretName": "bootstrap"},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "MetalStackMachineTemplate", "name": SET}}
            }
        }
    })
}

/// Waits until the MachineSet's status.replicas (what it last reported having) is `replicas`;
/// a timeout shows its status and Cluster API's log.
async fn wait_reported(env: &Env, sets: &Api<MachineSet>, replicas: i32) {
    let what = format!("the MachineSet to report {replicas} replicas");
    eventually_seen(&what, support::LOADED_MACHINE_WAIT, || async {
        let set = sets.get(SET).await.map_err(|e| e.to_string())?;
        match set.status.as_ref().and_then(|s| s.replicas) {
            Some(n) if n == replicas => Ok(()),
            _ => Err(format!(
                "status {:?}; Cluster API's log:\n{}",
                set.status,
                env.capi_log()
            )),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_until_its_machine_set_has_created_the_rest() {
    let mut env = Env::with_inventory("machine-set", Inventory::default_lab()).await;
    // Far longer than the test: only the MachineSet's report ends the wait.
    env.start_capms(&["--machine-set-wait=1h"]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
        "metadata": {"name": SET},
        "spec": {"template": {"spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}}}
    }))
    .await;
    env.apply(machine_set(2)).await;
    let sets: Api<MachineSet> = Api::namespaced(env.client(), &env.ns.name);
    let uid = sets
        .get(SET)
        .await
        .expect("the MachineSet")
        .uid()
        .expect("uid");

    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
        "metadata": {"name": "replica"},
        "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}
    }))
    .await;
    env.apply(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "replica",
                     "labels": {"set": SET, "cluster.x-k8s.io/set-name": SET, "cluster.x-k8s.io/cluster-name": MSC},
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                                          "name": SET, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"clusterName": MSC, "bootstrap": {"dataSecretName": "bootstrap"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": "replica"}}
    }))
    .await;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let owned = |m: &MetalStackMachine| !m.owner_references().is_empty();
    wait_condition(
        &machines,
        "replica",
        "Cluster API to own the replica",
        owned,
    )
    .await;
    wait_reported(&env, &sets, 1).await;
    // A machine of no MachineSet, added after the replica was owned: once it is ready, capms
    // has had the owned replica in hand as long.
    env.add_lab_machine(MSC, "standalone", "bootstrap").await;
    let ready = |m: &MetalStackMachine| m.status.as_ref().is_some_and(|s| s.ready);
    wait_ready(&env, &machines, "standalone", ready).await;
    let waiting = machines.get("replica").await.expect("the replica");
    assert!(
        waiting.finalizers().is_empty() && waiting.status.is_none(),
        "the replica was taken up while its MachineSet still wanted another: {waiting:?}"
    );

    // The MachineSet now wants only the replica it has: it reports them all.
    env.apply(machine_set(1)).await;
    wait_ready(&env, &machines, "replica", ready).await;
}
