//! What a MetalStackFirewall reconcile observes and the steps it can take.

use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallStatus};
use crate::capi::Cluster;
use crate::controllers::allocation::AllocationStep;
use crate::controllers::allocation::{Found, Target};
use crate::reconciler::Decision;
use metal_api::types::FirewallCreateRequest;

/// What observe read. Deleting carries the ids of the machines still allocated for it.
pub type Observed = crate::reconciler::Observed<Live, Vec<String>>;

/// Read in the order decide looks at it: a later field is None when an earlier gate stopped
/// the reading.
#[derive(Debug, Default)]
pub struct Live {
    /// The MetalStackCluster the firewall belongs to (owner reference or cluster-name label).
    pub infrastructure: Option<MetalStackCluster>,
    /// That MetalStackCluster's Cluster, for the pause.
    pub cluster: Option<Cluster>,
    /// The cluster's private network, as far as it exists.
    pub network: Option<String>,
    pub found: Option<Found>,
}

/// The steps a MetalStackFirewall reconcile can take.
pub type FirewallStep = AllocationStep<FirewallCreateRequest>;

pub(crate) type FirewallDecision = Decision<FirewallStep, MetalStackFirewallStatus>;

/// Which machine the firewall means: the one noted in status, else spec.providerID's.
pub fn target(fw: &MetalStackFirewall, msc: &MetalStackCluster) -> Result<Target, String> {
    let recorded = fw.status.as_ref().and_then(|s| s.machine_id.as_deref());
    Target::of(
        fw.spec.provider_id.as_deref(),
        &msc.spec.partition,
        recorded,
    )
}
