//! Which changes of Cluster API's objects wake capms's: only the facts capms's reconciles read.
//! Cluster API writes Clusters' and Machines' status often; those writes wake nothing.
//!
//! A Cluster wakes its MetalStackCluster, firewall and MetalStackMachines when a gate changes
//! (`spec.paused`, infrastructure provisioned, deletion). Without that wake a machine created while
//! its Cluster was paused (clusterctl move creates everything on the target paused, then
//! unpauses the Cluster) would wait for the next resync, as nothing about the machine or its
//! Machine changes when the Cluster resumes. A Machine wakes its MetalStackMachine when what the
//! machine reads of it changes: its bootstrap data, cluster, role or infrastructure reference (a
//! Machine's deletion brings its MetalStackMachine's own). A MetalStackCluster wakes its
//! machines when its network becomes usable to them. A MetalStackMachine already being
//! deleted is not woken by its Cluster: its teardown reads nothing of it.

use super::feeds::fingerprint;
use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use crate::capi::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, Cluster, Machine};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

/// The Cluster facts capms gates on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Gates {
    paused: bool,
    provisioned: bool,
    deleting: bool,
}

impl Gates {
    fn of(cluster: &Cluster) -> Gates {
        Gates {
            paused: cluster.is_paused(),
            provisioned: cluster
                .status
                .as_ref()
                .and_then(|s| s.initialization.as_ref())
                .and_then(|i| i.infrastructure_provisioned)
                .unwrap_or(false),
            deleting: cluster.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The fingerprint of a Cluster's gates (and identity, so a re-created Cluster wakes too).
pub fn cluster_gates(cluster: &Cluster) -> u64 {
    fingerprint(&(
        &cluster.metadata.uid,
        Gates::of(cluster),
        cluster.metal_stack_cluster(),
    ))
}

/// The fingerprint of what a MetalStackMachine reads of its Machine.
pub fn machine_facts(machine: &Machine) -> u64 {
    fingerprint(&(
        &machine.metadata.uid,
        &machine.spec.bootstrap.data_secret_name,
        &machine.spec.cluster_name,
        machine.labels().contains_key(CONTROL_PLANE_LABEL),
        machine.metal_stack_machine(),
    ))
}

/// The fingerprint of what a MetalStackMachine reads of its MetalStackCluster: the network it
/// allocates into, once the cluster is provisioned. A machine waiting for its cluster goes on
/// as soon as it is, not only once Cluster API has copied that into the Cluster.
pub fn infrastructure(msc: &MetalStackCluster) -> u64 {
    fingerprint(&(
        &msc.metadata.uid,
        super::machine::decide::provisioned_network(msc),
    ))
}

/// The MetalStackMachines of the Clusters (in `clusters`) whose infrastructure is `msc`.
pub fn machines_on(
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

/// The MetalStackMachines of `cluster` in `store` (by Cluster API's cluster-name label).
pub fn machines_of(
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

/// The MetalStackFirewall of `cluster`: the one its MetalStackCluster owns.
pub fn firewall_of(cluster: &Cluster) -> Option<ObjectRef<MetalStackFirewall>> {
    let ns = cluster.namespace().unwrap_or_default();
    let msc = cluster.metal_stack_cluster()?;
    Some(ObjectRef::new(&super::cluster::firewall_name(msc)).within(&ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(paused: bool, provisioned: Option<bool>) -> Cluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"paused": paused},
            "status": {"initialization": {"infrastructureProvisioned": provisioned}},
        }))
        .unwrap_or_else(|e| panic!("cluster: {e}"))
    }

    #[test]
    fn only_the_gates_change_a_clusters_fingerprint() {
        let paused = cluster_gates(&cluster(true, Some(true)));
        let mut noisy = cluster(true, Some(true));
        noisy.metadata.resource_version = Some("2".into());
        noisy.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        assert_eq!(cluster_gates(&noisy), paused, "status and metadata noise");
        let unpaused = cluster_gates(&cluster(false, Some(true)));
        assert_ne!(unpaused, paused, "unpaused");
        assert_ne!(
            cluster_gates(&cluster(false, None)),
            unpaused,
            "provisioned lost"
        );
        let mut deleting = cluster(false, None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_ne!(
            cluster_gates(&deleting),
            cluster_gates(&cluster(false, None)),
            "deletion"
        );
    }

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

    /// A store holding `objects`, as a watch would fill it.
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
    fn a_clusters_firewall_is_named_after_its_metal_stack_cluster() {
        let mut c = cluster(false, None);
        c.spec.infrastructure_ref = Some(crate::capi::ContractRef {
            kind: "MetalStackCluster".into(),
            name: "msc".into(),
            ..Default::default()
        });
        let fw = firewall_of(&c).unwrap_or_else(|| panic!("a firewall"));
        assert_eq!(
            (fw.name.as_str(), fw.namespace.as_deref()),
            ("msc-firewall", Some("ns"))
        );
        assert!(firewall_of(&cluster(false, None)).is_none());
    }
}
