//! Where a MetalStackMachine's machine goes when its Machine names a failure domain: a free
//! machine of its size in that rack, or a wait naming why there is none, without I/O.

use super::model::{MachineInputs, RackCandidates};
use crate::api::MetalStackMachine;
use crate::controllers::allocation::{RackChoice, RackMachines};
use crate::reconciler::conditions::Reason;
use kube::ResourceExt;

/// Where the machine goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// Where metal-api puts it: the Machine names no failure domain (or the object names its
    /// machine in spec.providerID).
    Anywhere,
    /// This free machine of the Machine's rack.
    Machine(String),
    /// Nowhere yet: the reason and message of the object's Ready condition.
    Waits { reason: Reason, message: String },
}

pub(super) fn placed(msm: &MetalStackMachine, open: &MachineInputs, partition: &str) -> Placed {
    let rack = open.machine.spec.failure_domain.as_deref();
    let (Some(rack), Some(candidates)) = (rack, open.rack_candidates.as_ref()) else {
        return Placed::Anywhere;
    };
    let RackCandidates::Machines(candidates) = candidates else {
        return Placed::Waits {
            reason: Reason::FailureDomainNotReported,
            message: format!(
                "Machine {} spec.failureDomain: {rack:?} cannot be honoured: MetalStackCluster {} reaches metal-stack with a project token (API v2), which sees no free machines and cannot pin one to a rack, so it reports no failure domains; valid: none; nothing is allocated",
                open.machine.name_any(),
                open.msc.name_any(),
            ),
        };
    };
    let reported: Vec<String> = open
        .msc
        .status
        .iter()
        .flat_map(|s| s.failure_domains.iter().map(|d| d.name.clone()))
        .collect();
    let racks = RackMachines {
        machines: candidates,
        partition,
    };
    let size = &msm.spec.machine_type;
    let uid = msm.uid().unwrap_or_else(|| msm.name_any());
    match racks.choose(rack, size, &reported, &uid) {
        RackChoice::Machine(id) => Placed::Machine(id),
        RackChoice::NotReported { valid } => Placed::Waits {
            reason: Reason::FailureDomainNotReported,
            message: format!(
                "Machine {} spec.failureDomain: {rack:?} is not a failure domain of MetalStackCluster {}; valid: {}; nothing is allocated",
                open.machine.name_any(),
                open.msc.name_any(),
                crate::choices(&valid)
            ),
        },
        RackChoice::NoneFree { elsewhere } => Placed::Waits {
            reason: Reason::NoMachineInFailureDomain,
            message: format!(
                "no machine of size {size} is free in rack {rack} (Machine {} spec.failureDomain); racks with one: {}; nothing is allocated until one is free there",
                open.machine.name_any(),
                crate::choices(&elsewhere)
            ),
        },
    }
}
