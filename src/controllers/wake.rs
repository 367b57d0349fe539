//! Which changes of Cluster API's objects wake capms's: only the facts capms's reconciles read.
//! Cluster API writes Clusters' and Machines' status often; those writes wake nothing.
//!
//! A Cluster wakes its MetalStackCluster, firewall and MetalStackMachines when a gate changes
//! (`spec.paused`, infrastructure provisioned, deletion). Without that wake a machine created while
//! its Cluster was paused (clusterctl move creates everything on the target paused, then
//! unpauses the Cluster) would wait for the next resync, as nothing about the machine or its
//! Machine changes when the Cluster resumes. A Machine wakes its MetalStackMachine when what the
//! machine reads of it changes: its bootstrap data, cluster, role or infrastructure reference (a
//! Machine's deletion brings its MetalStackMachine's own). A MetalStackMachine already being
//! deleted is not woken by its Cluster: its teardown reads nothing of it.

use super::feeds::fingerprint;
use crate::api::{MetalStackFirewall, MetalStackMachine};
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
