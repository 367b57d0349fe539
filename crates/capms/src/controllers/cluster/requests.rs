//! What metal-api gets when a MetalStackCluster allocates: its private network and its
//! control-plane IP, each with the owner marks that find it again.

use super::PURPOSE_CONTROL_PLANE;
use crate::api::MetalStackCluster;
use crate::ownership::{OwnerKind, cluster_id, cluster_tag, owner_marks_of, owner_tags};
use kube::ResourceExt;
use metal_api::tags::CLUSTER_ID;
use metal_api::types::{IpAllocateRequest, NetworkAllocateRequest};

pub(crate) fn network_request(msc: &MetalStackCluster) -> NetworkAllocateRequest {
    let ns = msc.namespace().unwrap_or_default();
    let name = msc.name_any();
    let mut labels = owner_marks_of(OwnerKind::Cluster, msc);
    labels.insert(CLUSTER_ID.into(), cluster_id(&ns, &name));
    NetworkAllocateRequest {
        projectid: msc.spec.project_id.clone(),
        partitionid: msc.spec.partition.clone(),
        name: name.clone(),
        description: format!("private network of cluster {ns}/{name}, allocated by capms"),
        labels,
        ..Default::default()
    }
}

/// The control-plane IP in the public network `network`: `type_` ephemeral when capms picks it,
/// static when it reserves the given host; `how` is "allocated" or "reserved".
pub(crate) fn ip_request(
    msc: &MetalStackCluster,
    network: &str,
    type_: &str,
    how: &str,
) -> IpAllocateRequest {
    let ns = msc.namespace().unwrap_or_default();
    let name = msc.name_any();
    let mut tags = owner_tags(&owner_marks_of(OwnerKind::Cluster, msc));
    tags.push(PURPOSE_CONTROL_PLANE.into());
    tags.push(cluster_tag(&ns, &name));
    IpAllocateRequest {
        networkid: network.to_owned(),
        projectid: msc.spec.project_id.clone(),
        type_: type_.into(),
        name: format!("{name}-control-plane"),
        description: format!("control-plane IP of cluster {ns}/{name}, {how} by capms"),
        tags,
        ..Default::default()
    }
}
