//! The admitted kinds. Each kind's file implements `Admit`; this registry names the kinds and
//! sends each review to its kind's implementation. Adding a kind: its file, and its line in
//! each table here.

mod cluster;
mod firewall;
mod firewall_template;
mod machine;

use super::admit::{self, AdmissionPhase, Admit, Allowed, Denial, Review};
use crate::api::{
    MetalStackCluster, MetalStackClusterTemplate, MetalStackFirewall, MetalStackFirewallTemplate,
    MetalStackMachine, MetalStackMachineTemplate,
};
use crate::conversion::Schema;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmittedKind {
    Cluster,
    ClusterTemplate,
    Firewall,
    FirewallTemplate,
    Machine,
    MachineTemplate,
}

impl AdmittedKind {
    pub const ALL: [AdmittedKind; 6] = [
        AdmittedKind::Cluster,
        AdmittedKind::ClusterTemplate,
        AdmittedKind::Firewall,
        AdmittedKind::FirewallTemplate,
        AdmittedKind::Machine,
        AdmittedKind::MachineTemplate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AdmittedKind::Cluster => "MetalStackCluster",
            AdmittedKind::ClusterTemplate => "MetalStackClusterTemplate",
            AdmittedKind::Firewall => "MetalStackFirewall",
            AdmittedKind::FirewallTemplate => "MetalStackFirewallTemplate",
            AdmittedKind::Machine => "MetalStackMachine",
            AdmittedKind::MachineTemplate => "MetalStackMachineTemplate",
        }
    }

    pub(crate) fn singular(self) -> String {
        self.name().to_lowercase()
    }

    pub fn plural(self) -> String {
        format!("{}s", self.singular())
    }

    /// Whether the kind has defaults for objects of capms's own schema (its mutating webhook
    /// is installed).
    pub(crate) fn defaulted(self) -> bool {
        let capms = Schema::Capms;
        match self {
            AdmittedKind::Cluster => MetalStackCluster::defaulted_in(capms),
            AdmittedKind::ClusterTemplate => MetalStackClusterTemplate::defaulted_in(capms),
            AdmittedKind::Firewall => MetalStackFirewall::defaulted_in(capms),
            AdmittedKind::FirewallTemplate => MetalStackFirewallTemplate::defaulted_in(capms),
            AdmittedKind::Machine => MetalStackMachine::defaulted_in(capms),
            AdmittedKind::MachineTemplate => MetalStackMachineTemplate::defaulted_in(capms),
        }
    }
}

/// The review of an object of `kind` in `phase`: its defaults or its checks. A denial of an
/// object that does not fit its type names every misfit field and what the checks say about
/// the rest.
pub(super) async fn review(
    kind: AdmittedKind,
    phase: AdmissionPhase,
    review: &Review<'_>,
) -> Result<Allowed, Denial> {
    match kind {
        AdmittedKind::Cluster => of::<MetalStackCluster>(phase, review).await,
        AdmittedKind::ClusterTemplate => of::<MetalStackClusterTemplate>(phase, review).await,
        AdmittedKind::Firewall => of::<MetalStackFirewall>(phase, review).await,
        AdmittedKind::FirewallTemplate => of::<MetalStackFirewallTemplate>(phase, review).await,
        AdmittedKind::Machine => of::<MetalStackMachine>(phase, review).await,
        AdmittedKind::MachineTemplate => of::<MetalStackMachineTemplate>(phase, review).await,
    }
}

async fn of<K: Admit>(phase: AdmissionPhase, review: &Review<'_>) -> Result<Allowed, Denial> {
    let decided = match phase {
        AdmissionPhase::Mutating => admit::mutate::<K>(review).await,
        AdmissionPhase::Validating => admit::validate::<K>(review).await,
    };
    // Only a denial can come from an object that does not fit its type.
    let Err(denial) = decided else {
        return decided;
    };
    match admit::misfit::<K>(review).await {
        Some(misfit) => Err(Denial::Misfit(misfit)),
        None => Err(denial),
    }
}
