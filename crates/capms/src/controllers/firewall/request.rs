//! The firewall allocation metal-api gets for a MetalStackFirewall: the cluster's private and
//! public networks plus the spec's, the rules, and the tags that find it again.

use crate::api::{MetalStackCluster, MetalStackFirewall, Protocol};
use crate::ownership::{
    FIREWALL_DEPLOYMENT_LABEL, GO_PROVIDER_MANAGER, OwnerKind, cluster_tag, firewall_identity,
    identity_of, owner_marks_of, owner_tags,
};
use kube::ResourceExt;
use metal_api::types::{
    AllocationNetwork, FirewallCreateRequest, FirewallEgressRule, FirewallIngressRule,
    FirewallRules, MachineAllocateRequest,
};

/// The firewall allocation: the cluster's private and public networks plus the spec's, the
/// rules, and the tags that find it again.
pub fn request(
    fw: &MetalStackFirewall,
    msc: &MetalStackCluster,
    network: &str,
    preset: Option<String>,
) -> FirewallCreateRequest {
    let ns = fw.namespace().unwrap_or_default();
    let name = fw.name_any();
    let mut tags = owner_tags(&owner_marks_of(OwnerKind::Firewall, fw));
    tags.push(cluster_tag(&ns, &msc.name_any()));
    // A firewall deployment's firewall is tagged as the Go provider tags it, so that what its
    // users run beside it finds it, and capms finds it again the same way.
    let manager = match fw.labels().contains_key(FIREWALL_DEPLOYMENT_LABEL) {
        true => {
            tags.extend(owner_tags(&firewall_identity(fw)));
            tags.extend(owner_tags(&identity_of(OwnerKind::Cluster, msc)));
            GO_PROVIDER_MANAGER
        }
        false => "capms",
    };
    tags.push(format!("firewall.metal-stack.io/managed-by={manager}"));
    // A cluster without a public network of its own (the Go provider's API) takes its firewall's
    // outside networks from the spec's networks alone.
    let mut ids = vec![network.to_owned()];
    ids.extend(msc.spec.public_network_id.clone());
    for extra in &fw.spec.networks {
        if !ids.contains(extra) {
            ids.push(extra.clone());
        }
    }
    let networks = ids
        .into_iter()
        .map(|networkid| AllocationNetwork {
            networkid,
            autoacquire: Some(true),
        })
        .collect();
    FirewallCreateRequest {
        machine: MachineAllocateRequest {
            uuid: preset,
            name: name.clone(),
            description: format!(
                "firewall of cluster {ns}/{}, allocated by capms",
                msc.name_any()
            ),
            hostname: name,
            projectid: msc.spec.project_id.clone(),
            partitionid: msc.spec.partition.clone(),
            sizeid: fw.spec.machine_type.clone(),
            imageid: fw.spec.image.clone(),
            networks: Some(networks),
            ssh_pub_keys: fw.spec.ssh_keys.clone(),
            tags,
            ..Default::default()
        },
        firewall_rules: fw.spec.rules.as_ref().map(rules),
    }
}

/// The spec's rules as metal-api takes them.
fn rules(r: &crate::api::FirewallRules) -> FirewallRules {
    let proto = |p: Option<Protocol>| match p.unwrap_or_default() {
        Protocol::Tcp => "tcp".to_owned(),
        Protocol::Udp => "udp".to_owned(),
    };
    FirewallRules {
        egress: r
            .egress
            .iter()
            .map(|e| FirewallEgressRule {
                protocol: proto(e.protocol),
                ports: e.ports.clone(),
                to: e.to.clone(),
                comment: e.comment.clone().unwrap_or_default(),
            })
            .collect(),
        ingress: r
            .ingress
            .iter()
            .map(|i| FirewallIngressRule {
                protocol: proto(i.protocol),
                ports: i.ports.clone(),
                from: i.from.clone(),
                to: i.to.clone(),
                comment: i.comment.clone().unwrap_or_default(),
            })
            .collect(),
    }
}
