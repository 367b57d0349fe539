//! What a MetalStackFirewall reconcile reads, in the order `decide` looks at it.

use super::FINALIZER;
use super::model::{FirewallGate, FirewallInputs, Observed, target};
use crate::api::{MetalStackCluster, MetalStackFirewall};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::controllers::allocation::{self, Found};
use crate::ownership::{OwnerKind, firewall_identity, identity_of};
use crate::reconciler::gates::{
    capi_owner, deletion_hands_off, is_externally_managed, paused_reason,
};
use crate::reconciler::writes::has_finalizer;
use crate::reconciler::{Context, Result};
use kube::ResourceExt;
use metal_api::types::{NetworkFindRequest, ROLE_FIREWALL};

fn identity(fw: &MetalStackFirewall) -> std::collections::BTreeMap<String, String> {
    firewall_identity(fw)
}

/// Reads what `decide` needs, in its order, stopping at the first gate that is closed.
pub async fn observe(fw: &MetalStackFirewall, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(fw) {
        return Ok(Observed::Unmanaged);
    }
    if fw.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(fw, FINALIZER) {
            return Ok(Observed::Deleting(None));
        }
        let cluster = fw.labels().get(CLUSTER_NAME_LABEL);
        if deletion_hands_off(ctx, fw, cluster.map(String::as_str)).await? {
            return Ok(Observed::HandsOff);
        }
        let ns = fw.namespace().unwrap_or_default();
        let msc = owning_cluster(fw, ctx).await?;
        let listing = msc
            .as_ref()
            .map(|msc| allocation::teardown_query(&ns, &msc.name_any()));
        let metal = super::act::metal_of(fw, ctx).await?;
        let recorded = fw.status.as_ref().and_then(|s| s.machine_id.as_deref());
        let named = allocation::named_machine(fw.spec.provider_id.as_deref(), recorded);
        let marks = identity(fw);
        let owned =
            allocation::owned(ctx, &metal, &marks, listing.as_ref(), named.as_deref()).await?;
        return Ok(Observed::Deleting(Some(owned)));
    }
    Ok(Observed::Live(Box::new(gate(fw, ctx).await?)))
}

/// The gates, in order: reads each one's facts and stops at the first that is closed.
async fn gate(fw: &MetalStackFirewall, ctx: &Context) -> Result<FirewallGate> {
    let Some(msc) = owning_cluster(fw, ctx).await? else {
        return Ok(FirewallGate::NoCluster);
    };
    let ns = fw.namespace().unwrap_or_default();
    let cluster = match capi_owner(&msc, "Cluster") {
        Some(name) => ctx.get::<Cluster>(&ns, &name).await?,
        None => None,
    };
    if let Some(reason) = paused_reason(fw, cluster.as_ref()) {
        return Ok(FirewallGate::Paused(reason));
    }
    let Some(network) = private_network(&msc, ctx).await? else {
        let cluster = msc.name_any();
        return Ok(FirewallGate::NoNetwork { cluster });
    };
    let found = match target(fw, &msc) {
        Ok(target) => {
            let ready = fw.status.as_ref().is_some_and(|s| s.ready);
            let listing = allocation::query(ctx, &msc, ready);
            let metal = ctx.metal_of(&msc).await?;
            let marks = identity(fw);
            allocation::lookup(ctx, &metal, &marks, &target, ROLE_FIREWALL, &listing).await?
        }
        // decide names the malformed field; nothing to look up.
        Err(_) => Found::Nothing,
    };
    let inputs = FirewallInputs {
        msc,
        network,
        found,
    };
    Ok(FirewallGate::Open(Box::new(inputs)))
}

/// The MetalStackCluster a firewall belongs to: its controller owner, else the cluster named by
/// its cluster-name label (the seed's standalone form).
pub(super) async fn owning_cluster(
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
        .metal_of(msc)
        .await?
        .network_find(&find)
        .await?
        .into_iter()
        .next()
        .map(|n| n.id))
}
