//! What a MetalStackMachine reconcile observes and the steps it can take, and the facts about
//! the object and its cluster that observe, decide and the watches share.

use crate::api::{MetalStackCluster, MetalStackMachine, MetalStackMachineStatus};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster, Machine as CapiMachine};
use crate::controllers::allocation::AllocationStep;
use crate::controllers::allocation::Found;
use crate::reconciler::Decision;
use kube::ResourceExt;
use metal_api::types::MachineAllocateRequest;

/// What observe read. Deleting carries the ids of the machines still allocated for it.
pub type Observed = crate::reconciler::Observed<Live, Vec<String>>;

/// Read in the order decide looks at it: a later field is None when an earlier gate stopped
/// the reading.
#[derive(Debug, Default)]
pub struct Live {
    /// The Machine named by the owner reference.
    pub machine: Option<CapiMachine>,
    pub cluster: Option<Cluster>,
    /// The Cluster's MetalStackCluster.
    pub infrastructure: Option<MetalStackCluster>,
    /// The bootstrap Secret's `value`.
    pub user_data: Option<String>,
    pub found: Option<Found>,
    /// When observe read: how long a wait has lasted is measured against it.
    pub now: jiff::Timestamp,
    /// Read only while the object lacks capms's finalizer (and its Cluster is not paused): the
    /// Machine's MachineSet is still creating replicas.
    pub machine_set_creating: bool,
    /// While it is: when it last created a replica (its newest Machine's creation).
    pub machine_set_newest: Option<jiff::Timestamp>,
    /// How long a MachineSet may go without creating a replica before its waiting replicas
    /// start anyway, and a tenth of the longest wait (the manager's `--machine-set-wait`).
    pub machine_set_wait: std::time::Duration,
}

/// The steps a MetalStackMachine reconcile can take.
pub type MachineStep = AllocationStep<MachineAllocateRequest>;

pub(crate) type MachineDecision = Decision<MachineStep, MetalStackMachineStatus>;

/// The owner marks that find what capms allocated for a MetalStackMachine.
pub fn identity(msm: &MetalStackMachine) -> std::collections::BTreeMap<String, String> {
    crate::ownership::identity_of(crate::ownership::OwnerKind::Machine, msm)
}

/// The partition a machine is allocated in: its own, else its cluster's.
pub fn partition(msm: &MetalStackMachine, msc: &MetalStackCluster) -> String {
    msm.spec
        .partition
        .clone()
        .unwrap_or_else(|| msc.spec.partition.clone())
}

/// The private network of a provisioned MetalStackCluster.
pub(crate) fn provisioned_network(msc: &MetalStackCluster) -> Option<&str> {
    msc.status
        .as_ref()
        .filter(|s| s.initialization.as_ref().and_then(|i| i.provisioned) == Some(true))
        .and_then(|s| s.network_id.as_deref())
}

/// The name of the Cluster the machine belongs to.
pub fn cluster_name(msm: &MetalStackMachine, machine: &CapiMachine) -> String {
    msm.labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .unwrap_or_else(|| machine.spec.cluster_name.clone())
}
