//! The cluster's firewall through one of the Go provider's MetalStackFirewallDeployments, as the
//! Go provider links them: the deployment is the cluster's (its controller owner, with the
//! cluster-name label), the firewall is made on the machine the deployment names, and the
//! firewall's machine is recorded back on it. A deployment serves one cluster.

use super::model::{FirewallSeen, Step};
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
    Nobodys(Step),
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
                Whose::Nobodys(Step::ClaimDeployment {
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
pub fn for_deployment(fw: &mut MetalStackFirewall, deployment: &MetalStackFirewallDeployment) {
    let labels = fw.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(FIREWALL_DEPLOYMENT_LABEL.to_owned(), deployment.name_any());
    let managed = deployment.spec.managed_resource_ref.as_ref();
    fw.spec.provider_id = managed.map(|r| r.name.clone()).filter(|n| !n.is_empty());
}

/// The firewall's machine, once allocated, written to the deployment's
/// spec.managedResourceRef where the Go provider keeps it: what it finds again if an operator
/// goes back to it.
pub fn record_on_deployment(fw: &MetalStackFirewall, seen: &FirewallSeen) -> Option<Step> {
    let deployment = seen.deployment.as_ref()?.as_ref().ok()?;
    let provider_id = fw.spec.provider_id.clone()?;
    let recorded = deployment.spec.managed_resource_ref.as_ref();
    (recorded.map(|r| &r.name) != Some(&provider_id))
        .then(|| Step::RecordFirewallOnDeployment(deployment.name_any(), provider_id))
}

/// What the cluster's firewall deployment asks that capms does not do yet, said rather than
/// silently ignored.
pub fn not_acted_on(seen: &FirewallSeen) -> Option<String> {
    let deployment = seen.deployment.as_ref()?.as_ref().ok()?;
    let auto_update = deployment.spec.auto_update.as_ref()?;
    auto_update.machine_image.filter(|on| *on).map(|_| {
        format!(
            "; spec.autoUpdate.machineImage of MetalStackFirewallDeployment {} is not acted on yet: capms does not replace a running firewall with a newer image",
            deployment.name_any()
        )
    })
}
