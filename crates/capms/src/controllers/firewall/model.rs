//! What a MetalStackFirewall reconcile observes and the steps it can take.

use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallStatus};
use crate::controllers::allocation::AllocationStep;
use crate::controllers::allocation::{Found, InvalidProviderId, Target};
use crate::reconciler::Decision;
use metal_api::types::FirewallCreateRequest;

/// What observe read. Deleting carries the ids of the machines still allocated for it.
pub type Observed = crate::reconciler::Observed<FirewallGate, Vec<String>>;

/// The gates a live MetalStackFirewall passes before capms allocates for it. `observe` walks
/// them in this order, reads nothing past the first closed one, and is the one place the order
/// is stated: `decide` reports a closed gate and never checks one again.
#[derive(Debug)]
pub enum FirewallGate {
    /// The MetalStackCluster it belongs to (owner reference or cluster-name label) is not
    /// there (yet).
    NoCluster,
    /// Reconciliation is paused, by the Cluster or by the object's own annotation: why.
    Paused(String),
    /// The MetalStackCluster `name` has no private network yet.
    NoNetwork { cluster: String },
    /// Every gate is open.
    Open(Box<FirewallInputs>),
}

/// What allocating needs, read once every gate is open.
#[derive(Debug)]
pub struct FirewallInputs {
    pub msc: MetalStackCluster,
    /// The cluster's private network.
    pub network: String,
    /// What metal-api holds for the firewall.
    pub found: Found,
}

/// The steps a MetalStackFirewall reconcile can take.
pub type FirewallStep = AllocationStep<FirewallCreateRequest>;

pub(crate) type FirewallDecision = Decision<FirewallStep, MetalStackFirewallStatus>;

/// Which machine the firewall means: the one noted in status, else spec.providerID's.
pub(crate) fn target(
    fw: &MetalStackFirewall,
    msc: &MetalStackCluster,
) -> Result<Target, InvalidProviderId> {
    let recorded = fw.status.as_ref().and_then(|s| s.machine_id.as_deref());
    Target::of(
        fw.spec.provider_id.as_deref(),
        &msc.spec.partition,
        recorded,
    )
}
