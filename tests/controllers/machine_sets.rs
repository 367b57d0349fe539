//! A new replica waits while its MachineSet is still creating its siblings, and goes on once
//! the MachineSet reports them all, or has created none for `--machine-set-wait`; a machine of
//! no MachineSet never waits. Real Cluster API core: its MachineSet controller reports the
//! replicas, its Machine controller owns the MetalStackMachines.

use super::*;
use capms::capi::MachineSet;
use kube::ResourceExt;

const SET: &str = "workers";

/// A MachineSet wanting `replicas` that creates none itself (Cluster API's
/// disable-machine-create annotation), so it counts only the Machines the test makes.
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

/// A replica of the MachineSet with `uid`, made as Cluster API's MachineSet controller makes
/// one: its MetalStackMachine, then its Machine owned by the MachineSet.
async fn add_replica(env: &Env, uid: &str, name: &str) {
    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
        "metadata": {"name": name},
        "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}
    }))
    .await;
    env.apply(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name,
                     "labels": {"set": SET, "cluster.x-k8s.io/set-name": SET, "cluster.x-k8s.io/cluster-name": MSC},
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                                          "name": SET, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"clusterName": MSC, "bootstrap": {"dataSecretName": "bootstrap"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": name}}
    }))
    .await;
}

/// Asserts that capms has not taken up replica `name`: no finalizer, no status.
async fn assert_untouched(machines: &Api<MetalStackMachine>, name: &str) {
    let waiting = machines.get(name).await.expect("the replica");
    assert!(
        waiting.finalizers().is_empty() && waiting.status.is_none(),
        "replica {name} was taken up while its MachineSet still wanted another: {waiting:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_while_its_machine_set_creates_until_it_reports_them_all_or_stalls() {
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

    add_replica(&env, &uid, "replica").await;
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
    assert_untouched(&machines, "replica").await;

    // The MachineSet now wants only the replica it has: it reports them all.
    env.apply(machine_set(1)).await;
    wait_ready(&env, &machines, "replica", ready).await;

    // A MachineSet that stops creating: it wants three, has two, and makes no more. capms,
    // started again with a short wait, lets the newest replica go on once the MachineSet has
    // created none for that long, while it still wants another.
    env.apply(machine_set(3)).await;
    add_replica(&env, &uid, "replica-2").await;
    wait_condition(
        &machines,
        "replica-2",
        "Cluster API to own the second replica",
        owned,
    )
    .await;
    wait_reported(&env, &sets, 2).await;
    // Held as the first was, under the hour-long wait.
    env.add_lab_machine(MSC, "standalone-2", "bootstrap").await;
    wait_ready(&env, &machines, "standalone-2", ready).await;
    assert_untouched(&machines, "replica-2").await;
    drop(env.capms.take());
    env.start_capms(&["--machine-set-wait=5s"]);
    wait_ready(&env, &machines, "replica-2", ready).await;
    let set = sets.get(SET).await.expect("the MachineSet");
    assert!(
        set.creating(),
        "the MachineSet no longer wanted another, so its report, not its stall, ended the wait: {:?}",
        set.status
    );
}
