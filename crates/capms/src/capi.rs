//! The parts of Cluster API's core types (v1beta2) capms reads. Unknown fields are ignored, so
//! these stay valid as Cluster API adds fields.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Label Cluster API sets on every object of a cluster.
pub(crate) const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Annotation that pauses reconciliation of one object.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Annotation clusterctl move puts on the objects it deletes from the source cluster after
/// moving them: their infrastructure lives on, managed from the target.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
/// Annotation of objects an external system manages; capms leaves them alone.
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// Label of the Machines of a control plane.
pub(crate) const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
/// Label selecting which manager instance reconciles an object (`--watch-filter`).
pub(crate) const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
pub const GROUP: &str = "cluster.x-k8s.io";
/// Cluster API's annotations naming the template an object was cloned from (its name, and its
/// `Kind.group`).
pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
pub const CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// Reference to a provider object, as v1beta2 writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContractRef {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub bootstrap: Bootstrap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractRef>,
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The failure domain (for capms a rack) the Machine is to be placed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
}

/// What capms reads of a Machine's status: the v1beta2 conditions it acts on ([`READ_CONDITIONS`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "read_conditions"
    )]
    pub conditions: Vec<Condition>,
}

/// The Machine conditions capms reads; the others are dropped as a Machine is decoded. Cluster
/// API sets about ten per Machine, most of a Machine's size in the watch cache, which holds every
/// Machine of every cluster (about 3 KB each at 1,000 workers).
const READ_CONDITIONS: [&str; 2] = [NODE_READY, OWNER_REMEDIATED];

/// Decodes a Machine's conditions, keeping those of [`READ_CONDITIONS`]; `null` is none.
fn read_conditions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Condition>, D::Error> {
    use serde::de::Error as _;
    let conditions = Option::<Vec<Condition>>::deserialize(d)
        .map_err(|e| D::Error::custom(format!("a list of conditions: {e}")))?;
    let mut conditions = conditions.unwrap_or_default();
    conditions.retain(|c| READ_CONDITIONS.contains(&c.type_.as_str()));
    conditions.shrink_to_fit();
    Ok(conditions)
}

/// A Machine's condition: its Node is Ready.
pub(crate) const NODE_READY: &str = "NodeReady";
/// A Machine's condition, set False by the owner (its MachineSet or control plane) remediating it
/// or, with external remediation, by the remediating provider giving it up.
pub(crate) const OWNER_REMEDIATED: &str = "OwnerRemediated";
/// Annotation asking the MachineHealthCheck to treat a Machine as unhealthy; the remediating
/// provider clears it.
pub(crate) const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
}

/// A MachineSet: how many replicas it wants, and how many it had when it last reported.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineSet",
    namespaced,
    status = "MachineSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

impl MachineSet {
    /// Is the MachineSet still creating replicas: does it want more than it had when it last
    /// reported? Cluster API reports the Machines it found before a creating pass; its next
    /// reconcile, woken by their creation, reports them all (Machines being deleted count too).
    pub fn creating(&self) -> bool {
        let had = self.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        self.metadata.deletion_timestamp.is_none() && had < self.spec.replicas.unwrap_or(0)
    }

    /// Is `machine` one of this MachineSet's replicas? By uid: a MachineSet deleted and made
    /// again under the same name does not inherit the replicas of the old one.
    pub fn owns(&self, machine: &Machine) -> bool {
        let Some(uid) = self.metadata.uid.as_deref() else {
            return false;
        };
        let refs = machine
            .metadata
            .owner_references
            .as_deref()
            .unwrap_or_default();
        refs.iter().any(|o| o.kind == "MachineSet" && o.uid == uid)
    }

    /// When this MachineSet last created a replica, as far as `machine` tells: its creation, if
    /// it is one of them.
    pub(crate) fn replica_created(&self, machine: &Machine) -> Option<jiff::Timestamp> {
        let created = machine.metadata.creation_timestamp.as_ref()?;
        self.owns(machine).then_some(created.0)
    }
}

impl Cluster {
    pub(crate) fn is_paused(&self) -> bool {
        self.spec.paused == Some(true)
    }

    /// The MetalStackCluster this Cluster's infrastructure is (in the Cluster's namespace), if
    /// its infrastructureRef names one.
    pub fn metal_stack_cluster(&self) -> Option<&str> {
        self.spec
            .infrastructure_ref
            .as_ref()
            .filter(|r| r.kind == "MetalStackCluster")
            .map(|r| r.name.as_str())
    }
}

/// A KubeadmControlPlane: how many replicas it wants, has and has up to date (read before one
/// of its machines is remediated).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmControlPlane",
    namespaced,
    status = "KubeadmControlPlaneStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
}

impl Machine {
    /// The Machine's v1beta2 condition of `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        let status = self.status.as_ref()?;
        status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Is the Machine's Node Ready, as Cluster API last saw it?
    pub(crate) fn node_ready(&self) -> bool {
        self.condition(NODE_READY)
            .is_some_and(|c| c.status == "True")
    }

    /// Is the Machine one of a control plane's?
    pub(crate) fn is_control_plane(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
    }

    /// The MetalStackMachine this Machine's infrastructure is, if its infrastructureRef names one.
    pub fn metal_stack_machine(&self) -> Option<&str> {
        self.spec
            .infrastructure_ref
            .as_ref()
            .filter(|r| r.kind == "MetalStackMachine")
            .map(|r| r.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": "False", "reason": "Waiting",
            "message": "a message", "lastTransitionTime": "2026-12-06T20:00:00Z"})
    }

    #[test]
    fn a_machine_keeps_only_the_conditions_capms_reads() {
        let all = [
            "Available",
            "Ready",
            NODE_READY,
            "BootstrapConfigReady",
            OWNER_REMEDIATED,
            "InfrastructureReady",
        ];
        let status = serde_json::json!({
            "conditions": all.map(condition), "phase": "Running"
        });
        let status: MachineStatus = serde_json::from_value(status).expect("decodes");
        let kept: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(kept, [NODE_READY, OWNER_REMEDIATED]);
        assert_eq!(status.conditions[0].message, "a message");
    }

    #[test]
    fn a_machine_without_conditions_has_none() {
        for status in [
            serde_json::json!({}),
            serde_json::json!({"conditions": null}),
        ] {
            let status: MachineStatus = serde_json::from_value(status).expect("decodes");
            assert!(status.conditions.is_empty());
        }
        let wrong = serde_json::json!({"conditions": "Ready"});
        let error = serde_json::from_value::<MachineStatus>(wrong).expect_err("refused");
        assert!(
            error.to_string().contains("a list of conditions"),
            "{error}"
        );
    }
}
