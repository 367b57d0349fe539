//! The racks a MetalStackCluster reports as Cluster API failure domains, read from the catalog
//! of its metal-api's machines (`allocation::RackMachines` decides which).

use crate::api::{FailureDomain, MetalStackCluster, MetalStackMachine, MetalStackMachineTemplate};
use crate::capi::CLUSTER_NAME_LABEL;
use crate::controllers::allocation::RackMachines;
use crate::ownership::cluster_tag;
use crate::reconciler::{Context, Result};
use kube::ResourceExt;
use metal_api::Catalog;
use std::collections::BTreeSet;

/// The attribute naming a failure domain's partition.
const PARTITION_ATTRIBUTE: &str = "partition";

/// The racks the cluster reports, or None when metal-api's machines cannot be had in time (the
/// list stays as it was). No racks with a metal-apiserver project token (API v2): it sees no
/// free machines and cannot pin one to a rack, so a rack could not be honoured.
pub(super) async fn observe(
    msc: &MetalStackCluster,
    ctx: &Context,
    owner: &str,
) -> Result<Option<Vec<String>>> {
    if ctx.metal_of(msc).await?.is_v2() {
        return Ok(Some(Vec::new()));
    }
    let Ok(catalog) = ctx.catalog_of(msc).await?.get().await else {
        return Ok(None);
    };
    let ns = msc.namespace().unwrap_or_default();
    let mut sizes: BTreeSet<String> = ctx
        .pick(&ns, |t: &MetalStackMachineTemplate| {
            Some(t.spec.template.spec.machine_type.clone())
        })
        .await?
        .into_iter()
        .collect();
    let of_cluster = |m: &MetalStackMachine| {
        m.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(owner)
    };
    let machine_sizes = ctx.pick(&ns, |m: &MetalStackMachine| {
        of_cluster(m).then(|| m.spec.machine_type.clone())
    });
    sizes.extend(machine_sizes.await?);
    let racks = RackMachines {
        machines: &catalog.machines,
        partition: &msc.spec.partition,
    };
    let tag = cluster_tag(&ns, &msc.name_any());
    Ok(Some(racks.failure_domains(&sizes, &tag)))
}

/// The status list of `racks` in `partition`: every rack may hold control-plane machines.
pub(super) fn listed(racks: &[String], partition: &str) -> Vec<FailureDomain> {
    let attributes = [(PARTITION_ATTRIBUTE.to_owned(), partition.to_owned())];
    racks
        .iter()
        .map(|rack| FailureDomain {
            name: rack.clone(),
            control_plane: Some(true),
            attributes: attributes.clone().into(),
        })
        .collect()
}

/// What of the catalog changes the racks clusters report: the racks holding a free machine, by
/// partition and size. A refresh that changes it wakes every cluster.
pub(super) fn free_racks(catalog: &Catalog) -> BTreeSet<(String, String, String)> {
    let free = catalog.machines.iter().filter(|m| m.is_free());
    free.filter_map(|m| {
        let partition = m.partition.as_ref()?.id.clone();
        let size = m.size.as_ref()?.id.clone();
        Some((partition, m.rackid.clone(), size))
    })
    .collect()
}
