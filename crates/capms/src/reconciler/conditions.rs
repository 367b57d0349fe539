//! The conditions capms reports, typed: each condition type is one step of provisioning and
//! `Ready` summarises them; reasons are PascalCase, as Cluster API's are.

use super::error::Category;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The condition types capms sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
pub enum Type {
    /// Summary: the object is provisioned, or the reason it is not.
    Ready,
    /// Reconciliation is paused by the Cluster or the object's annotation.
    Paused,
    NetworkReady,
    #[strum(serialize = "ControlPlaneIPReady")]
    ControlPlaneIpReady,
    FirewallReady,
    /// The serving firewall has the cluster's current firewall spec; False while a firewall for
    /// a changed spec rolls in, or after it failed to.
    FirewallRolledOut,
    MachineAllocated,
    MachineHealthy,
    FirewallAllocated,
    FirewallHealthy,
    /// A remediation's attempt is under way (True), or why none is.
    Remediating,
    /// A machine template's capacity and node info are read from metal-api (True), or why not.
    CapacityKnown,
}

impl Type {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a condition has its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
pub(crate) enum Reason {
    Paused,
    NotPaused,
    Deleting,
    WaitingForClusterOwnerRef,
    WaitingForCluster,
    WaitingForClusterInfrastructure,
    WaitingForBootstrapData,
    WaitingForNetwork,
    WaitingForMachines,
    WaitingForFirewall,
    WaitingForNetworkRelease,
    Provisioning,
    Provisioned,
    NetworkReady,
    #[strum(serialize = "ControlPlaneIPReady")]
    ControlPlaneIpReady,
    NoFirewall,
    FirewallCreated,
    FirewallReady,
    FirewallTemplateNotFound,
    FirewallDeploymentNotFound,
    /// The firewall deployment is another cluster's.
    FirewallDeploymentTaken,
    FirewallRolledOut,
    /// A firewall for the changed firewall spec is on its way.
    RollingOut,
    /// The firewall for the changed spec did not become ready in time.
    RolloutFailed,
    Allocating,
    Allocated,
    /// The machine capms allocated went away outside capms.
    MachineLost,
    PhonedHome,
    CrashLoop,
    FailedReclaim,
    NotAlive,
    /// A remediation's Machine, MetalStackMachine or metal-stack machine is not (yet) there.
    WaitingForMachine,
    /// A remediation's Machine is not one of capms's MetalStackMachines.
    NotMetalStack,
    /// The control plane cannot spare a machine now (rolling out, or short of quorum).
    WaitingForControlPlane,
    /// The machine was power-cycled; capms waits for the node.
    PowerCycled,
    /// The machine is being installed again; capms waits for the node.
    Reinstalling,
    /// The node is back after an attempt.
    Remediated,
    /// Every attempt failed: the Machine is handed back for replacement.
    RetriesExhausted,
    /// The strategy reinstalls, which the cluster's metal-api cannot (API v2 has no reinstall):
    /// the Machine is handed back for replacement.
    ReinstallUnavailable,
    /// The machine was remediated successfully too recently to be remediated again.
    RemediatedRecently,
    CapacityKnown,
    /// A template's size is not in metal-api.
    UnknownSize,
    /// A template's image resolves to no machine image in metal-api.
    UnknownImage,
    /// A template's size states no minimum cores or memory.
    SizeWithoutMinimum,
    /// A template's size names an architecture Cluster API does not know.
    UnknownArchitecture,
    /// A Machine names a failure domain its cluster does not report.
    FailureDomainNotReported,
    /// No machine of the size is free in the rack a Machine names.
    NoMachineInFailureDomain,
    /// A reconcile failed; the category says how.
    Failed(Category),
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Failed(category) => category.reason(),
            other => other.into(),
        }
    }
}

/// Sets conditions of one object at one generation, keeping each condition's
/// lastTransitionTime while its status stays the same.
pub(crate) struct Conditions<'a> {
    list: &'a mut Vec<Condition>,
    generation: Option<i64>,
}

impl<'a> Conditions<'a> {
    pub fn of(list: &'a mut Vec<Condition>, generation: Option<i64>) -> Self {
        Conditions { list, generation }
    }

    pub(crate) fn set_true(&mut self, type_: Type, reason: Reason, message: impl Into<String>) {
        self.set(type_, "True", reason, message.into());
    }

    pub(crate) fn set_false(&mut self, type_: Type, reason: Reason, message: impl Into<String>) {
        self.set(type_, "False", reason, message.into());
    }

    /// True or False as `ok` says.
    pub(crate) fn set_to(
        &mut self,
        ok: bool,
        type_: Type,
        reason: Reason,
        message: impl Into<String>,
    ) {
        self.set(
            type_,
            if ok { "True" } else { "False" },
            reason,
            message.into(),
        );
    }

    fn set(&mut self, type_: Type, status: &str, reason: Reason, message: String) {
        let generation = self.generation;
        match self.list.iter_mut().find(|c| c.type_ == type_.as_str()) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = Time(jiff::Timestamp::now());
                }
                c.status = status.into();
                c.reason = reason.as_str().into();
                c.message = message;
                c.observed_generation = generation;
            }
            None => self.list.push(Condition {
                type_: type_.as_str().into(),
                status: status.into(),
                reason: reason.as_str().into(),
                message,
                observed_generation: generation,
                last_transition_time: Time(jiff::Timestamp::now()),
            }),
        }
    }
}

/// The condition of `type_`, if set.
pub fn find(list: &[Condition], type_: Type) -> Option<&Condition> {
    list.iter().find(|c| c.type_ == type_.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn conditions_keep_their_transition_time_while_the_status_stays() {
        let mut list = Vec::new();
        Conditions::of(&mut list, Some(1)).set_false(Type::Ready, Reason::Provisioning, "wait");
        let first = list[0].last_transition_time.clone();
        std::thread::sleep(Duration::from_millis(5));
        Conditions::of(&mut list, Some(2)).set_false(Type::Ready, Reason::Allocating, "still");
        assert_eq!(
            list[0].last_transition_time, first,
            "same status, same time"
        );
        assert_eq!(
            (list[0].reason.as_str(), list[0].observed_generation),
            ("Allocating", Some(2))
        );
        Conditions::of(&mut list, Some(2)).set_true(Type::Ready, Reason::PhonedHome, "ok");
        assert_ne!(list[0].last_transition_time, first);
        assert_eq!(list[0].status, "True");
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn reasons_are_pascal_case() {
        let reasons = [
            Reason::ControlPlaneIpReady,
            Reason::Failed(Category::KubeConflict),
            Reason::Failed(Category::InvalidSpec),
            Reason::WaitingForNetworkRelease,
        ];
        for r in reasons {
            let s = r.as_str();
            assert!(
                s.chars().next().is_some_and(|c| c.is_ascii_uppercase()),
                "{s}"
            );
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric()), "{s}");
        }
        assert_eq!(Type::ControlPlaneIpReady.as_str(), "ControlPlaneIPReady");
    }
}
