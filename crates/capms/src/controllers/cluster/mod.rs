//! MetalStackCluster: the cluster's private network, control-plane IP and firewall.
//!
//! `observe` reads, `decide` chooses the next step without I/O (`firewall` for the cluster's
//! firewall, `teardown` for deletion), `act` takes it, and the engine writes the status once;
//! `watches` says what wakes a MetalStackCluster.

mod act;
mod decide;
mod deployment;
mod failure_domains;
mod firewall;
mod model;
mod observe;
mod requests;
pub(crate) mod rollout;
mod teardown;
#[cfg(test)]
mod tests;
pub mod watches;

use crate::api::{MetalStackCluster, MetalStackClusterStatus, MetalStackFirewall};
use crate::reconciler::{Context, Effect, Error, Reconciler, Requeue, Result, failure};
use kube::ResourceExt;
use model::{ClusterDecision, ClusterStep, Observed};

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/cluster";
/// Tag of the control-plane IP, next to the owner tags.
const PURPOSE_CONTROL_PLANE: &str =
    "metal-stack.infrastructure.cluster.x-k8s.io/purpose=control-plane";

/// Name of the MetalStackFirewall a MetalStackCluster creates.
pub fn firewall_name(cluster: &str) -> String {
    format!("{cluster}-firewall")
}

/// Is `fw` one of MetalStackCluster `cluster`'s firewalls (it is their controller)? By name, not
/// UID: `clusterctl move` and restores re-create the cluster with a new UID.
pub(crate) fn belongs_to(fw: &MetalStackFirewall, cluster: &str) -> bool {
    fw.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "MetalStackCluster" && o.name == cluster)
}

/// The MetalStackCluster controller's parts.
pub struct Clusters;

impl Reconciler for Clusters {
    type Object = MetalStackCluster;
    type Observed = Observed;
    type Step = ClusterStep;
    type Status = MetalStackClusterStatus;

    fn status(obj: &MetalStackCluster) -> Option<&MetalStackClusterStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackCluster, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackCluster, observed: &Observed) -> ClusterDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackCluster, ctx: &Context, step: &ClusterStep) -> Result<()> {
        act::act(obj, ctx, step).await
    }

    fn step_name(step: &ClusterStep) -> &'static str {
        step.into()
    }

    fn effect(step: &ClusterStep) -> Effect {
        match step {
            ClusterStep::Nothing => Effect::Nothing,
            ClusterStep::CreateFirewall(_)
            | ClusterStep::UpdateFirewall(_)
            | ClusterStep::RollInFirewall(_)
            | ClusterStep::RelabelFirewall { .. }
            | ClusterStep::RetireFirewall(..)
            | ClusterStep::DeleteFirewall(_)
            | ClusterStep::RecordFirewallOnDeployment(..)
            | ClusterStep::ClaimDeployment { .. } => Effect::Elsewhere,
            ClusterStep::AddFinalizer | ClusterStep::PatchEndpoint(_) => Effect::OwnObject,
            ClusterStep::AllocateNetwork(_)
            | ClusterStep::AllocateIp(_)
            | ClusterStep::ReserveIp(..)
            | ClusterStep::FreeIp(_)
            | ClusterStep::FreeNetwork(_)
            | ClusterStep::FreeRetired(..) => Effect::MetalApi,
            ClusterStep::RemoveFinalizer => Effect::LetsGo,
        }
    }

    fn failed(
        obj: &MetalStackCluster,
        status: MetalStackClusterStatus,
        error: Error,
        step: Option<&ClusterStep>,
    ) -> (MetalStackClusterStatus, Result<Requeue>) {
        // metal-api refuses to free a network whose prefixes still hold IPs (422) while it
        // releases the machines' IPs: that is a wait, not a failure.
        if let (Some(ClusterStep::FreeNetwork(id)), Error::Metal(e)) = (step, &error)
            && e.status() == Some(422)
        {
            let (status, wait) = teardown::network_still_busy(obj, status, id, e);
            return (status, Ok(wait));
        }
        failure::<Self>(status, error, step, |s, e| {
            decide::after_failure(obj, s, e, step)
        })
    }
}
