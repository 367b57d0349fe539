//! A new replica waits while its MachineSet is still creating its siblings, and goes on once
//! the MachineSet reports them all, or has created none for `--machine-set-wait`; a machine of
//! no MachineSet never waits. Its machine is allocated during the wait (metal-api only), and
//! freed at once when the replica is deleted before capms took it up. Real Cluster API core: its MachineSet controller reports the
//! replicas, its Machine controller owns the MetalStackMachines.

use super::*;
use capms::capi::MachineSet;
use capms::ownership::{OwnerKind, identity, owner_tags};
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

/// The metal-api machine allocated for replica `name`, if any: found by capms's owner mark.
fn allocated_for(env: &Env, name: &str) -> Option<String> {
    let marks = identity(OwnerKind::Machine, &env.ns.name, name);
    let mark = owner_tags(&marks).pop().expect("one identity mark");
    let state = env.sim.sim.state();
    let mut machines = state.machines.values();
    let ours = machines.find(|m| m.allocation.is_some() && m.tags.contains(&mark));
    ours.map(|m| m.id.clone())
}

/// Waits until the simulator has allocated a machine for replica `name`.
async fn wait_allocated(env: &Env, name: &str) -> String {
    let what = format!("a machine allocated for held replica {name}");
    eventually(&what, support::LOADED_MACHINE_WAIT, || async {
        allocated_for(env, name)
    })
    .await
}

/// Adds replica `name` of the MachineSet with `uid` and waits until Cluster API owns it.
async fn add_owned_replica(env: &Env, machines: &Api<MetalStackMachine>, uid: &str, name: &str) {
    add_replica(env, uid, name).await;
    let owned = |m: &MetalStackMachine| !m.owner_references().is_empty();
    let what = format!("Cluster API to own replica {name}");
    wait_condition(machines, name, &what, owned).await;
}

/// Asserts that capms has not taken up replica `name`: no finalizer, no status.
async fn assert_untouched(machines: &Api<MetalStackMachine>, name: &str) {
    let waiting = machines.get(name).await.expect("the replica");
    assert!(
        waiting.finalizers().is_empty() && waiting.status.is_none(),
        "replica {name} was taken up while its MachineSet still wanted another: {waiting:?}"
    );
}

/// A cluster with the MachineSet of [`SET`] wanting two replicas, and capms started with
/// `args`: the environment and the MachineSet's uid.
async fn with_machine_set(prefix: &str, args: &[&str]) -> (Env, String) {
    let mut env = Env::with_inventory(prefix, Inventory::default_lab()).await;
    env.start_capms(args);
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
    (env, uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_while_its_machine_set_creates_until_it_reports_them_all_or_stalls() {
    // Far longer than the test: only the MachineSet's report ends the wait.
    let (mut env, uid) = with_machine_set("machine-set", &["--machine-set-wait=1h"]).await;
    let sets: Api<MachineSet> = Api::namespaced(env.client(), &env.ns.name);

    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    add_owned_replica(&env, &machines, &uid, "replica").await;
    wait_reported(&env, &sets, 1).await;
    // A machine of no MachineSet, added after the replica was owned: once it is ready, capms
    // has had the owned replica in hand as long.
    env.add_lab_machine(MSC, "standalone", "bootstrap").await;
    let ready = |m: &MetalStackMachine| m.status.as_ref().is_some_and(|s| s.ready);
    wait_ready(&env, &machines, "standalone", ready).await;
    assert_untouched(&machines, "replica").await;
    // Its machine installs meanwhile: allocated in metal-api, the object still unwritten.
    wait_allocated(&env, "replica").await;
    assert_untouched(&machines, "replica").await;

    // The MachineSet now wants only the replica it has: it reports them all.
    env.apply(machine_set(1)).await;
    wait_ready(&env, &machines, "replica", ready).await;

    // A MachineSet that stops creating: it wants three, has two, and makes no more. capms,
    // started again with a short wait, lets the newest replica go on once the MachineSet has
    // created none for that long, while it still wants another.
    env.apply(machine_set(3)).await;
    add_owned_replica(&env, &machines, &uid, "replica-2").await;
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

/// A replica Cluster API deletes while capms holds it for its MachineSet (allocated, not yet
/// taken up: no finalizer) has its machine freed as soon as capms sees it go, long before the
/// orphan sweep's grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_replica_deleted_before_capms_took_it_up_has_its_machine_freed_at_once() {
    let args = ["--machine-set-wait=1h", "--orphan-grace=1h"];
    let (env, uid) = with_machine_set("held-deleted", &args).await;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    add_owned_replica(&env, &machines, &uid, "replica").await;
    let id = wait_allocated(&env, "replica").await;
    assert_untouched(&machines, "replica").await;

    machines
        .delete("replica", &DeleteParams::default())
        .await
        .expect("delete the replica");
    let what = format!("machine {id}, left by the deleted replica, to be freed");
    eventually(&what, support::LOADED_MACHINE_WAIT, || async {
        let state = env.sim.sim.state();
        let freed = state
            .machines
            .get(&id)
            .is_some_and(|m| m.allocation.is_none());
        freed.then_some(())
    })
    .await;
}
