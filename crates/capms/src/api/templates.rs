//! MetalStackMachineTemplate, MetalStackClusterTemplate and MetalStackFirewallTemplate: what
//! MachineDeployments, ClusterClasses and MetalStackClusters create their objects from.

use super::cluster::{MetalStackCluster, MetalStackClusterSpec};
use super::common::TemplateMeta;
use super::firewall::MetalStackFirewallSpec;
use super::machine::MetalStackMachineSpec;
use super::v1alpha1::MetalStackFirewallDeployment;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;

/// Desired state of a MetalStackMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackMachineTemplate",
    namespaced,
    shortname = "msmt",
    category = "cluster-api",
    doc = "MetalStackMachineTemplate is the blueprint Cluster API clones MetalStackMachines from, for example for a MachineDeployment. Treat it as immutable: create a new template to roll out a change.",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.template.spec.machineType",
        description = "metal-stack size"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.template.spec.image",
        description = "Operating system image"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct MetalStackMachineTemplateSpec {
    /// The MetalStackMachine to create.
    pub template: MetalStackMachineTemplateResource,
}

/// A MetalStackMachine as a template describes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetalStackMachineTemplateResource {
    /// Labels and annotations for the created MetalStackMachines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    /// Spec of the created MetalStackMachines.
    pub spec: MetalStackMachineSpec,
}

/// Desired state of a MetalStackClusterTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackClusterTemplate",
    namespaced,
    shortname = "msct",
    category = "cluster-api",
    doc = "MetalStackClusterTemplate is the blueprint a ClusterClass clones MetalStackClusters from. Treat it as immutable: create a new template to roll out a change.",
    printcolumn(
        name = "Partition",
        type_ = "string",
        json_path = ".spec.template.spec.partition",
        description = "metal-stack partition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct MetalStackClusterTemplateSpec {
    /// The MetalStackCluster to create.
    pub template: MetalStackClusterTemplateResource,
}

/// A MetalStackCluster as a template describes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetalStackClusterTemplateResource {
    /// Labels and annotations for the created MetalStackClusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    /// Spec of the created MetalStackClusters.
    pub spec: MetalStackClusterSpec,
}

/// Desired state of a MetalStackFirewallTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackFirewallTemplate",
    namespaced,
    shortname = "msfwt",
    category = "cluster-api",
    doc = "MetalStackFirewallTemplate is a firewall blueprint that MetalStackClusters (or their ClusterClass templates) name in spec.firewallTemplateRef, so many clusters share one set of firewall rules. A change rolls the firewall of every cluster using it; a change whose networks a cluster using it could not get is refused.",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.template.spec.machineType",
        description = "metal-stack size"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.template.spec.image",
        description = "Firewall image"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct MetalStackFirewallTemplateSpec {
    /// The MetalStackFirewall to create.
    pub template: MetalStackFirewallTemplateResource,
}

/// A MetalStackFirewall as a template describes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MetalStackFirewallTemplateResource {
    /// Labels and annotations for the created MetalStackFirewalls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    /// Spec of the created MetalStackFirewalls. A providerID here would put every firewall made
    /// from the template onto one machine, so the template refuses it.
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!has(self.providerID)", "message": "a template cannot name a machine: every firewall made from it would claim the same one", "fieldPath": ".providerID"}
    ]))]
    pub spec: MetalStackFirewallSpec,
}

/// What a person reads when `field` names a `kind` (a firewall template or deployment) that does
/// not exist: the name, and those of the kind the namespace does have (the controller's condition
/// and the webhook's warning).
pub(crate) fn missing_reference(
    field: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    existing: &[String],
) -> String {
    format!(
        "{field}: {kind} {namespace}/{name} does not exist (yet); the firewall is created once it does; {kind}s in the namespace: {}",
        crate::choices(existing)
    )
}

/// The MetalStackClusters (of `clusters`) that take their firewall from `template`: by their
/// firewallTemplateRef, or through the firewall deployment (of `deployments`) they name. Both
/// references are local to the template's namespace.
pub(crate) fn clusters_using_template<'a, C: Borrow<MetalStackCluster>>(
    template: &MetalStackFirewallTemplate,
    clusters: &'a [C],
    deployments: &[impl Borrow<MetalStackFirewallDeployment>],
) -> Vec<&'a MetalStackCluster> {
    let name = template.name_any();
    let namespace = template.namespace();
    let through: Vec<String> = deployments
        .iter()
        .map(Borrow::borrow)
        .filter(|d| d.namespace() == namespace && d.spec.firewall_template_ref.name == name)
        .map(ResourceExt::name_any)
        .collect();
    let refers = |r: Option<&super::LocalObjectReference>, to: &dyn Fn(&str) -> bool| {
        r.is_some_and(|r| to(&r.name))
    };
    clusters
        .iter()
        .map(Borrow::borrow)
        .filter(|c| c.namespace() == namespace)
        .filter(|c| {
            refers(c.spec.firewall_template_ref.as_ref(), &|n| n == name)
                || refers(c.spec.firewall_deployment_ref.as_ref(), &|n| {
                    through.iter().any(|t| t == n)
                })
        })
        .collect()
}
