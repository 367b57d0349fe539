//! What a MetalStackRemediation reconcile observes and the steps it can take.

use crate::api::MetalStackMachine;
use crate::api::remediation::{MetalStackRemediationStatus, RemediationType};
use crate::capi::{KubeadmControlPlane, Machine as CapiMachine};
use crate::reconciler::Decision;

/// What observe read. Deleting carries whether the Machine still needs its attempts wound up.
pub type Observed = crate::reconciler::Observed<Live, Live>;

/// Read in the order decide looks at it: a later field is None when an earlier one was missing.
#[derive(Debug, Default)]
pub struct Live {
    /// The unhealthy Machine: the remediation's owner, of the same name.
    pub machine: Option<CapiMachine>,
    /// The Machine's MetalStackMachine, when its infrastructure is one.
    pub infrastructure: Option<MetalStackMachine>,
    /// What metal-api shows of its machine: None when it has none or metal-api does not know it.
    pub metal: Option<MetalFacts>,
    /// For a control-plane Machine: what its control plane can spare.
    pub control_plane: Option<ControlPlaneFacts>,
    /// The MetalStackCluster of the Machine's cluster: where a retired machine is recorded.
    pub cluster_record: Option<ClusterRecord>,
    /// When observe read.
    pub now: jiff::Timestamp,
}

/// The facts about a metal-stack machine a remediation decides on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetalFacts {
    pub id: String,
    /// The image of its allocation (a reinstall installs it again).
    pub image: String,
    /// When metal-api last recorded a reboot capms asked for (`Planned Reboot`), if it shows one.
    pub last_planned_reboot: Option<jiff::Timestamp>,
    /// When the machine last phoned home after its newest reboot or installation, if its newest
    /// event is `Phoned Home`.
    pub phoned_home: Option<jiff::Timestamp>,
    /// Can its metal-api install it again? metal-stack's API v2 has no reinstall.
    pub reinstallable: bool,
}

/// A MetalStackCluster as a remediation sees it: its name and the machines it records retired.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterRecord {
    pub name: String,
    pub retired: std::collections::BTreeSet<String>,
}

/// What a control plane can spare while one of its machines is remediated.
#[derive(Debug, Clone, Default)]
pub struct ControlPlaneFacts {
    pub control_plane: Option<KubeadmControlPlane>,
    /// Its other machines whose Node is Ready.
    pub other_ready: usize,
    /// Its other machines remediated by capms right now.
    pub other_remediating: usize,
}

#[derive(Debug, PartialEq, strum::IntoStaticStr, strum::VariantNames)]
pub enum RemediationStep {
    Nothing,
    AddFinalizer,
    /// A power cycle of the machine.
    PowerCycle(String),
    /// The machine's image installed again: (machine, image).
    Reinstall(String, String),
    /// The Machine's remediate-machine annotation cleared and its remediation noted (the time):
    /// a merge patch of its annotations.
    Conclude(serde_json::Value),
    /// The machine recorded retired on a MetalStackCluster before its Machine is given up:
    /// freed neither with the Machine nor by the orphan sweep.
    Retire {
        cluster: String,
        machine: String,
        /// A merge patch of the MetalStackCluster's annotations.
        record: serde_json::Value,
    },
    /// `OwnerRemediated=False` on the Machine: its owner replaces it.
    GiveUp(serde_json::Value),
    RemoveFinalizer,
}

impl RemediationStep {
    /// The attempt a remediation type makes on `machine`.
    pub fn attempt(kind: RemediationType, machine: &MetalFacts) -> RemediationStep {
        match kind {
            RemediationType::Reboot => RemediationStep::PowerCycle(machine.id.clone()),
            RemediationType::Reinstall => {
                RemediationStep::Reinstall(machine.id.clone(), machine.image.clone())
            }
        }
    }
}

pub(crate) type RemediationDecision = Decision<RemediationStep, MetalStackRemediationStatus>;
