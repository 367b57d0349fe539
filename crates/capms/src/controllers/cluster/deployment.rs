//! The cluster's firewall through one of the Go provider's MetalStackFirewallDeployments, as the
//! Go provider links them: the deployment is the cluster's (its controller owner, with the
//! cluster-name label), the firewall is made on the machine the deployment names, and the
//! firewall's machine is recorded back on it. A deployment serves one cluster.

use super::model::{ClusterStep, FirewallSeen};
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{MetalStackCluster, MetalStackFirewall};
use crate::capi::CLUSTER_NAME_LABEL;
use crate::ownership::FIREWALL_DEPLOYMENT_LABEL;
use kube::{Resource, ResourceExt};

/// Whose the deployment is.
pub enum Whose {
    /// This cluster's: its controller owner.
    Ours,
    /// Nobody's yet: the step that makes it this cluster's.
    Nobodys(ClusterStep),
    /// Another object's: what a person reads.
    Others(String),
}

/// Whose `deployment` is, for cluster `msc` of Cluster `cluster_name`.
pub fn claim(
    msc: &MetalStackCluster,
    cluster_name: &str,
    deployment: &MetalStackFirewallDeployment,
) -> Whose {
    let owner = deployment
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    match owner {
        Some(o) if o.kind == MetalStackCluster::kind(&()) && o.name == msc.name_any() => {
            Whose::Ours
        }
        Some(o) => Whose::Others(format!(
            "spec.firewallDeploymentRef: MetalStackFirewallDeployment {} belongs to {} {} (its controller owner); a firewall deployment serves one cluster",
            deployment.name_any(),
            o.kind,
            o.name
        )),
        None => match msc.controller_owner_ref(&()) {
            Some(ours) => {
                let mut owners = deployment.owner_references().to_vec();
                owners.push(ours);
                Whose::Nobodys(ClusterStep::ClaimDeployment {
                    name: deployment.name_any(),
                    owners,
                    labels: [(CLUSTER_NAME_LABEL.to_owned(), cluster_name.to_owned())].into(),
                })
            }
            // Not a stored object (no UID): nothing to own it by.
            None => Whose::Ours,
        },
    }
}

/// A firewall made for one of the Go provider's firewall deployments: labelled with its name, so
/// that it is tagged as the Go provider tags its firewalls, and on the machine the deployment
/// names (the firewall the Go provider allocated, taken over).
pub(crate) fn for_deployment(
    fw: &mut MetalStackFirewall,
    deployment: &MetalStackFirewallDeployment,
) {
    let labels = fw.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(FIREWALL_DEPLOYMENT_LABEL.to_owned(), deployment.name_any());
    let managed = deployment.spec.managed_resource_ref.as_ref();
    fw.spec.provider_id = managed.map(|r| r.name.clone()).filter(|n| !n.is_empty());
}

/// The firewall's machine, once allocated, written to the deployment's
/// spec.managedResourceRef where the Go provider keeps it: what it finds again if an operator
/// goes back to it.
pub(crate) fn record_on_deployment(
    fw: &MetalStackFirewall,
    seen: &FirewallSeen,
) -> Option<ClusterStep> {
    let deployment = seen.deployment.as_ref()?.as_ref().ok()?;
    let provider_id = fw.spec.provider_id.clone()?;
    let recorded = deployment.spec.managed_resource_ref.as_ref();
    (recorded.map(|r| &r.name) != Some(&provider_id))
        .then(|| ClusterStep::RecordFirewallOnDeployment(deployment.name_any(), provider_id))
}

/// Does the cluster's firewall deployment ask for the newest firewall image?
pub(crate) fn auto_updates(deployment: &MetalStackFirewallDeployment) -> bool {
    let auto_update = deployment.spec.auto_update.as_ref();
    auto_update.and_then(|a| a.machine_image) == Some(true)
}

/// With spec.autoUpdate.machineImage, the firewall gets the newest firewall image of its
/// template image's operating system and minor version, which rolls the firewall when a newer
/// one appears.
pub(crate) fn follow_newest_image(fw: &mut MetalStackFirewall, seen: &FirewallSeen) {
    let follows = seen.deployment.as_ref().and_then(|d| d.as_ref().ok());
    if let (Some(newest), true) = (&seen.newest_image, follows.is_some_and(auto_updates)) {
        fw.spec.image.clone_from(newest);
    }
}

/// What the serving firewall follows, for its FirewallReady message.
pub fn following(seen: &FirewallSeen) -> Option<String> {
    let deployment = seen.deployment.as_ref()?.as_ref().ok()?;
    let newest = seen
        .newest_image
        .as_ref()
        .filter(|_| auto_updates(deployment))?;
    Some(format!(
        "; following spec.autoUpdate.machineImage of MetalStackFirewallDeployment {}: the newest firewall image is {newest}",
        deployment.name_any()
    ))
}
