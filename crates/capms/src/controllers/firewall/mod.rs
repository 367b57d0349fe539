//! MetalStackFirewall: a firewall machine in metal-api, ready while it is healthy.
//!
//! `observe` reads, `decide::decide` chooses the next step without I/O, `act` takes it, and
//! `step::reconcile` writes the status once.

pub mod decide;
#[cfg(test)]
mod tests;

use super::allocation::{self, Found};
use super::context::*;
use super::step::Reconciler;
use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallStatus};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use decide::{FirewallDecision, Live, Observed, Step};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use metal_api::types::{NetworkFindRequest, ROLE_FIREWALL};

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/firewall";

/// The MetalStackFirewall controller's parts.
pub struct Firewalls;

impl Reconciler for Firewalls {
    type Object = MetalStackFirewall;
    type Observed = Observed;
    type Step = Step;
    type Status = MetalStackFirewallStatus;

    fn status(obj: &MetalStackFirewall) -> Option<&MetalStackFirewallStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackFirewall, ctx: &Context) -> Result<Observed> {
        observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackFirewall, observed: &Observed) -> FirewallDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackFirewall, ctx: &Context, step: &Step) -> Result<()> {
        act(obj, ctx, step).await
    }

    fn writes_metal(step: &Step) -> bool {
        matches!(step, Step::Allocate(_) | Step::Free(_))
    }

    fn lets_go(step: &Step) -> bool {
        matches!(step, Step::RemoveFinalizer)
    }

    fn rewrites(step: &Step) -> bool {
        matches!(step, Step::AddFinalizer | Step::Record(_))
    }

    fn report(
        obj: &MetalStackFirewall,
        status: MetalStackFirewallStatus,
        error: &Error,
        _: Option<&Step>,
    ) -> MetalStackFirewallStatus {
        decide::after_failure(obj, status, error)
    }
}

fn identity(fw: &MetalStackFirewall) -> std::collections::BTreeMap<String, String> {
    identity_of(OwnerKind::Firewall, fw)
}

/// Reads what `decide` needs, in its order, stopping at the first gate that is closed.
async fn observe(fw: &MetalStackFirewall, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(fw) {
        return Ok(Observed::Unmanaged);
    }
    if fw.metadata.deletion_timestamp.is_some() {
        if !fw.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Observed::Deleting(None));
        }
        let cluster = fw.labels().get(CLUSTER_NAME_LABEL);
        if deletion_hands_off(ctx, fw, cluster.map(String::as_str)).await? {
            return Ok(Observed::HandsOff);
        }
        let ns = fw.namespace().unwrap_or_default();
        let listing = owning_cluster(fw, ctx)
            .await?
            .map(|msc| allocation::Listing::teardown(&ns, &msc.name_any()));
        let owned = allocation::owned(ctx, &identity(fw), listing.as_ref()).await?;
        return Ok(Observed::Deleting(Some(owned)));
    }
    let mut live = Live::default();
    let Some(msc) = owning_cluster(fw, ctx).await? else {
        return Ok(Observed::Live(Box::new(live)));
    };
    let ns = fw.namespace().unwrap_or_default();
    if let Some(name) = capi_owner(&msc, "Cluster") {
        live.cluster = ctx.get::<Cluster>(&ns, &name).await?;
    }
    let paused = paused_reason(fw, live.cluster.as_ref()).is_some();
    if !paused {
        live.network = private_network(&msc, ctx).await?;
    }
    if live.network.is_some() && fw.finalizers().iter().any(|f| f == FINALIZER) {
        live.found = Some(match decide::target(fw, &msc) {
            Ok(target) => {
                let ready = fw.status.as_ref().is_some_and(|s| s.ready);
                let listing = allocation::Listing::of(ctx, &msc, ready);
                allocation::lookup(ctx, &identity(fw), &target, ROLE_FIREWALL, &listing).await?
            }
            // decide names the malformed field; nothing to look up.
            Err(_) => Found::Nothing,
        });
    }
    live.infrastructure = Some(msc);
    Ok(Observed::Live(Box::new(live)))
}

/// The MetalStackCluster a firewall belongs to: its controller owner, else the cluster named by
/// its cluster-name label (the seed's standalone form).
async fn owning_cluster(
    fw: &MetalStackFirewall,
    ctx: &Context,
) -> Result<Option<MetalStackCluster>> {
    let ns = fw.namespace().unwrap_or_default();
    let owner = fw
        .owner_references()
        .iter()
        .find(|o| o.kind == "MetalStackCluster" && o.controller == Some(true));
    if let Some(o) = owner {
        return ctx.get::<MetalStackCluster>(&ns, &o.name).await;
    }
    let Some(cluster_name) = fw.labels().get(CLUSTER_NAME_LABEL) else {
        return Ok(None);
    };
    let cluster = ctx.get::<Cluster>(&ns, cluster_name).await?;
    match cluster.as_ref().and_then(|c| c.metal_stack_cluster()) {
        Some(name) => ctx.get::<MetalStackCluster>(&ns, name).await,
        None => Ok(None),
    }
}

/// The cluster's private network as far as it exists: recorded in status, given in spec, or
/// found in metal-api by the cluster's owner labels (so a lost status write does not hide it).
async fn private_network(msc: &MetalStackCluster, ctx: &Context) -> Result<Option<String>> {
    if let Some(id) = msc
        .status
        .as_ref()
        .and_then(|s| s.network_id.clone())
        .or_else(|| msc.spec.private_network_id.clone())
    {
        return Ok(Some(id));
    }
    let find = NetworkFindRequest {
        labels: Some(identity_of(OwnerKind::Cluster, msc)),
        ..Default::default()
    };
    Ok(ctx
        .metal
        .network_find(&find)
        .await?
        .into_iter()
        .next()
        .map(|n| n.id))
}

/// Takes the one step `decide` chose.
async fn act(fw: &MetalStackFirewall, ctx: &Context, step: &Step) -> Result<()> {
    let api = ctx.api::<MetalStackFirewall>(&fw.namespace().unwrap_or_default());
    match step {
        Step::Nothing => Ok(()),
        Step::AddFinalizer => ensure_finalizer(&api, fw, FINALIZER).await.map(|_| ()),
        Step::Allocate(request) => {
            let result = ctx.metal.firewall_allocate(request).await;
            allocation::allocated(ctx, &request.machine.tags, &result).await;
            allocation::announce(ctx, fw, "Firewall", result, "").map(|_| ())
        }
        Step::Record(patch) => {
            api.patch(
                &fw.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
            Ok(())
        }
        Step::Free(id) => allocation::free(ctx, fw, id, "Firewall").await,
        Step::RemoveFinalizer => remove_finalizer(&api, fw, FINALIZER).await,
    }
}
