//! Which changes of a Cluster wake the MetalStackMachines and the MetalStackFirewall that belong
//! to it: only the Cluster facts their reconciles gate on (`spec.paused`, infrastructure
//! provisioned, deletion). Cluster API writes a Cluster's status often; those writes wake
//! nothing. Without this wake a machine created while its Cluster was paused (clusterctl move
//! creates everything on the target paused, then unpauses the Cluster) would wait for the next
//! resync, because nothing about the machine or its Machine changes when the Cluster resumes.

use crate::api::{MetalStackFirewall, MetalStackMachine};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::HashMap;
use std::sync::Mutex;

/// The Cluster facts capms gates on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The gates of every Cluster seen, to tell a change that matters from one that does not.
#[derive(Default)]
pub struct ClusterChanges {
    seen: Mutex<HashMap<(String, String), Gates>>,
}

impl ClusterChanges {
    /// Did a gate of `cluster` change since the last event? A Cluster seen for the first time
    /// counts as changed: its objects may be waiting for it.
    pub fn gates_changed(&self, cluster: &Cluster) -> bool {
        let key = (cluster.namespace().unwrap_or_default(), cluster.name_any());
        let gates = Gates::of(cluster);
        // A panic elsewhere while holding the lock leaves a map of plain values: still usable.
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.insert(key, gates) != Some(gates)
    }
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
    fn only_the_gates_wake_and_a_first_sight_does() {
        let changes = ClusterChanges::default();
        assert!(
            changes.gates_changed(&cluster(true, Some(true))),
            "first sight"
        );
        assert!(
            !changes.gates_changed(&cluster(true, Some(true))),
            "status noise"
        );
        assert!(
            changes.gates_changed(&cluster(false, Some(true))),
            "unpaused"
        );
        assert!(!changes.gates_changed(&cluster(false, Some(true))));
        assert!(
            changes.gates_changed(&cluster(false, None)),
            "provisioned lost"
        );
        let mut deleting = cluster(false, None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(changes.gates_changed(&deleting), "deletion");
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
