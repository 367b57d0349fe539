//! What wakes a MetalStackMachine: its own changes (not its status), what it reads of its
//! Machine, its Cluster's gates, its MetalStackCluster's network becoming usable, its machine
//! changing stage in metal-api, and a new replica's MachineSet having created them all.
//! Cluster API writes Machines' and MachineSets' status often; those writes wake nothing. A
//! MetalStackMachine already being deleted is not woken by its Cluster: its teardown reads
//! nothing of it.

use super::FINALIZER;
use super::model::provisioned_network;
use crate::api::{MetalStackCluster, MetalStackMachine};
use crate::cache::watch::{fingerprint, own_change};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster, Machine, MachineSet};
use crate::controllers::Watches;
use crate::controllers::watches::cluster_gates;
use crate::ownership::OwnerKind;
use crate::reconciler::Context;
use crate::reconciler::handoffs::Handoffs;
use crate::reconciler::queue::{counted, counted_own, counted_refs};
use crate::reconciler::writes::has_finalizer;
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;
use std::time::Instant;

/// The MetalStackMachine controller, woken by everything above.
pub fn controller(watches: &mut Watches, ctx: &Context) -> Controller<MetalStackMachine> {
    let queues = &ctx.metrics.queues;
    let own = watches.metal_stack_machines.follow_changes(own_change);
    let machines = watches.metal_stack_machines.store();
    let (clusters, of_cluster) = (watches.clusters.store(), machines.clone());
    let (capi_machines, of_set) = (watches.machines.store(), machines.clone());
    let handoffs = ctx.handoffs.clone();
    Controller::for_shared_stream(counted_own(queues, own), machines.clone())
        .reconcile_on(counted_refs(
            queues,
            ctx.listings.follow(OwnerKind::Machine),
        ))
        .watches_shared_stream(
            watches.metal_stack_clusters.follow_changes(infrastructure),
            counted(queues, move |msc: Arc<MetalStackCluster>| {
                machines_on(&msc, &clusters, &of_cluster)
            }),
        )
        .watches_shared_stream(
            watches.machines.follow_changes(machine_facts),
            counted(queues, |m: Arc<Machine>| {
                let ns = m.namespace().unwrap_or_default();
                m.metal_stack_machine()
                    .map(|name| ObjectRef::<MetalStackMachine>::new(name).within(&ns))
            }),
        )
        .watches_shared_stream(
            watches.machines.follow_changes(taken_up),
            counted(queues, move |m: Arc<Machine>| {
                woken_by_uptake(&handoffs, &m)
            }),
        )
        .watches_shared_stream(
            watches.machine_sets.follow_changes(machine_set_progress),
            counted(queues, move |set: Arc<MachineSet>| {
                waiting_replicas(&set, &capi_machines, &of_set)
            }),
        )
        .watches_shared_stream(
            watches.clusters.follow_changes(cluster_gates),
            counted(queues, move |c: Arc<Cluster>| machines_of(&c, &machines)),
        )
}

/// The fingerprint of what a MetalStackMachine reads of its Machine: its bootstrap data,
/// cluster, role and infrastructure reference (a Machine's deletion brings its
/// MetalStackMachine's own).
pub(crate) fn machine_facts(machine: &Machine) -> u64 {
    fingerprint(&(
        &machine.metadata.uid,
        &machine.spec.bootstrap.data_secret_name,
        &machine.spec.cluster_name,
        machine.is_control_plane(),
        machine.metal_stack_machine(),
    ))
}

/// The fingerprint of a Machine having taken up its infrastructure (copied its spec.providerID):
/// that frees a place in the handoff window, which wakes the next MetalStackMachine waiting.
pub(crate) fn taken_up(machine: &Machine) -> u64 {
    fingerprint(&(&machine.metadata.uid, machine.spec.provider_id.is_some()))
}

/// The MetalStackMachines `machine` wakes through the handoff window: once it has taken up its
/// infrastructure, the next waiting for the place it frees.
pub fn woken_by_uptake(
    handoffs: &Handoffs,
    machine: &Machine,
) -> Vec<ObjectRef<MetalStackMachine>> {
    if machine.spec.provider_id.is_none() {
        return Vec::new();
    }
    let ns = machine.namespace().unwrap_or_default();
    let key = ObjectRef::new(&machine.name_any()).within(&ns);
    handoffs.taken_up(&key, Instant::now())
}

/// The fingerprint of what a new replica waits for in its MachineSet: the end of its creating.
pub(crate) fn machine_set_progress(set: &MachineSet) -> u64 {
    fingerprint(&(&set.metadata.uid, set.creating()))
}

/// The MetalStackMachines (in `msms`) of the Machines `set` controls (in `machines`) that wait
/// for it, once it has created them all. Those capms has taken up (with its finalizer) wait for
/// nothing here: a MachineSet finishing a rollout step does not wake its provisioned replicas.
pub(crate) fn waiting_replicas(
    set: &MachineSet,
    machines: &Store<Machine>,
    msms: &Store<MetalStackMachine>,
) -> Vec<ObjectRef<MetalStackMachine>> {
    if set.creating() {
        return Vec::new();
    }
    let ns = set.namespace().unwrap_or_default();
    machines
        .state()
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(ns.as_str()))
        .filter(|m| set.owns(m))
        .filter_map(|m| Some(ObjectRef::new(m.metal_stack_machine()?).within(&ns)))
        .filter(|r| {
            msms.get(r)
                .is_some_and(|msm| !has_finalizer(msm.as_ref(), FINALIZER))
        })
        .collect()
}

/// The fingerprint of what a MetalStackMachine reads of its MetalStackCluster: the network it
/// allocates into, once the cluster is provisioned. A machine waiting for its cluster goes on
/// as soon as it is, not only once Cluster API has copied that into the Cluster.
pub fn infrastructure(msc: &MetalStackCluster) -> u64 {
    fingerprint(&(&msc.metadata.uid, provisioned_network(msc)))
}

/// The MetalStackMachines of the Clusters (in `clusters`) whose infrastructure is `msc`.
pub(crate) fn machines_on(
    msc: &MetalStackCluster,
    clusters: &Store<Cluster>,
    machines: &Store<MetalStackMachine>,
) -> Vec<ObjectRef<MetalStackMachine>> {
    let (ns, name) = (msc.namespace(), msc.name_any());
    clusters
        .state()
        .iter()
        .filter(|c| c.namespace() == ns && c.metal_stack_cluster() == Some(name.as_str()))
        .flat_map(|c| machines_of(c, machines))
        .collect()
}

/// The MetalStackMachines of `cluster` in `store` (by Cluster API's cluster-name label) that
/// are not being deleted.
pub(crate) fn machines_of(
    cluster: &Cluster,
    store: &Store<MetalStackMachine>,
) -> Vec<ObjectRef<MetalStackMachine>> {
    let ns = cluster.namespace();
    let name = cluster.name_any();
    store
        .state()
        .iter()
        .filter(|m| m.namespace() == ns && m.labels().get(CLUSTER_NAME_LABEL) == Some(&name))
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::watches::test_cluster as cluster;

    #[test]
    fn only_what_a_machine_reads_changes_a_machines_fingerprint() {
        let machine = |secret: Option<&str>, phase: &str| -> Machine {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "m", "namespace": "ns", "uid": "u"},
                "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": secret},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "MetalStackMachine", "name": "msm"}},
                "status": {"phase": phase},
            }))
            .unwrap_or_else(|e| panic!("machine: {e}"))
        };
        let waiting = machine_facts(&machine(None, "Pending"));
        assert_eq!(
            machine_facts(&machine(None, "Provisioning")),
            waiting,
            "status"
        );
        assert_ne!(
            machine_facts(&machine(Some("s"), "Pending")),
            waiting,
            "bootstrap data"
        );
    }

    #[test]
    fn a_metal_stack_cluster_wakes_its_machines_when_its_network_becomes_usable() {
        let msc = |provisioned: bool, condition: &str| -> MetalStackCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
                "kind": "MetalStackCluster",
                "metadata": {"name": "msc", "namespace": "ns", "uid": "u"},
                "spec": {"partition": "p", "projectID": "x", "publicNetworkID": "internet"},
                "status": {"initialization": {"provisioned": provisioned}, "networkID": "n",
                           "conditions": [{"type": "FirewallReady", "status": "False",
                                           "reason": condition, "message": "",
                                           "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            }))
            .unwrap_or_else(|e| panic!("msc: {e}"))
        };
        let waiting = infrastructure(&msc(false, "Allocating"));
        assert_eq!(
            infrastructure(&msc(false, "Booting")),
            waiting,
            "progress before the network is usable"
        );
        let provisioned = infrastructure(&msc(true, "Booting"));
        assert_ne!(provisioned, waiting, "provisioned");
        assert_eq!(
            infrastructure(&msc(true, "Ready")),
            provisioned,
            "status noise"
        );
    }

    fn store<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        let mut writer = kube::runtime::reflector::store::Writer::default();
        for o in objects {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
        }
        writer.as_reader()
    }

    #[test]
    fn a_metal_stack_cluster_wakes_the_machines_of_the_clusters_it_serves() {
        let mut served = cluster(false, Some(true));
        served.spec.infrastructure_ref = Some(crate::capi::ContractRef {
            kind: "MetalStackCluster".into(),
            name: "msc".into(),
            ..Default::default()
        });
        let mut other = cluster(false, Some(true));
        other.metadata.name = Some("other".into());
        let machine = |name: &str, cluster: &str| -> MetalStackMachine {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
                "kind": "MetalStackMachine",
                "metadata": {"name": name, "namespace": "ns",
                             "labels": {CLUSTER_NAME_LABEL: cluster}},
                "spec": {"image": "i", "machineType": "t"},
            }))
            .unwrap_or_else(|e| panic!("machine: {e}"))
        };
        let clusters = store(vec![served, other]);
        let machines = store(vec![machine("m1", "c"), machine("m2", "other")]);
        let msc: MetalStackCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
            "kind": "MetalStackCluster",
            "metadata": {"name": "msc", "namespace": "ns"},
            "spec": {"partition": "p", "projectID": "x", "publicNetworkID": "internet"},
        }))
        .unwrap_or_else(|e| panic!("msc: {e}"));
        let woken = machines_on(&msc, &clusters, &machines);
        let names: Vec<&str> = woken.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["m1"], "only the machines of the Cluster it serves");
    }

    #[test]
    fn a_machine_set_wakes_its_replicas_once_it_has_created_them_all() {
        let set = |replicas: i32, had: Option<i32>| -> MachineSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                "metadata": {"name": "workers", "namespace": "ns", "uid": "u"},
                "spec": {"replicas": replicas, "clusterName": "c"},
                "status": {"replicas": had, "readyReplicas": had},
            }))
            .unwrap_or_else(|e| panic!("machine set: {e}"))
        };
        let machine = |name: &str, set: &str, uid: &str| -> Machine {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                    "name": set, "uid": uid, "controller": true}]},
                "spec": {"clusterName": "c",
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "MetalStackMachine", "name": name}},
            }))
            .unwrap_or_else(|e| panic!("machine: {e}"))
        };
        let creating = machine_set_progress(&set(3, Some(1)));
        assert_eq!(machine_set_progress(&set(3, None)), creating, "counting up");
        let created = machine_set_progress(&set(3, Some(3)));
        assert_ne!(created, creating, "all created");
        assert_eq!(
            machine_set_progress(&set(2, Some(3))),
            created,
            "scaling down"
        );

        let machines = store(vec![
            machine("w1", "workers", "u"),
            machine("w2", "workers", "u"),
            machine("o1", "others", "o"),
            // Of a MachineSet of the same name, deleted before this one was made.
            machine("g1", "workers", "gone"),
        ]);
        let msm = |name: &str, finalizers: &[&str]| -> MetalStackMachine {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
                "kind": "MetalStackMachine",
                "metadata": {"name": name, "namespace": "ns", "finalizers": finalizers},
                "spec": {"image": "i", "machineType": "t"},
            }))
            .unwrap_or_else(|e| panic!("machine: {e}"))
        };
        let msms = store(vec![
            msm("w1", &[]),
            msm("w2", &[FINALIZER]),
            msm("o1", &[]),
            msm("g1", &[]),
        ]);
        assert!(
            waiting_replicas(&set(3, Some(1)), &machines, &msms).is_empty(),
            "still creating"
        );
        let woken = waiting_replicas(&set(3, Some(3)), &machines, &msms);
        let names: Vec<&str> = woken.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["w1"],
            "only the MachineSet's own replicas capms has not taken up"
        );
    }
}
