//! MetalStackMachineTemplate, MetalStackClusterTemplate and MetalStackFirewallTemplate: what
//! MachineDeployments, ClusterClasses and MetalStackClusters create their objects from.

use super::cluster::{MetalStackCluster, MetalStackClusterSpec};
use super::common::{TemplateMeta, conditions_schema};
use super::firewall::MetalStackFirewallSpec;
use super::machine::MetalStackMachineSpec;
use super::v1alpha1::MetalStackFirewallDeployment;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// Desired state of a MetalStackMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackMachineTemplate",
    namespaced,
    status = "MetalStackMachineTemplateStatus",
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
        name = "CPU",
        type_ = "string",
        json_path = ".status.capacity.cpu",
        description = "Cores of a machine of the size",
        priority = 1
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory",
        description = "Memory of a machine of the size",
        priority = 1
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

/// What a node made from the template would have, for the cluster-autoscaler to scale a
/// MachineDeployment up from zero machines (Cluster API's opt-in autoscaling from zero). capms
/// keeps it current with metal-api's size and image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackMachineTemplateStatus {
    /// The least a machine of the size has: `cpu` (cores), `memory` and `ephemeral-storage`
    /// (bytes) from the minimums of the size's constraints, and `nvidia.com/gpu` where the size
    /// has GPUs. Empty while the size is unknown to metal-api or states no minimum cores or
    /// memory (the CapacityKnown condition says which).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub capacity: BTreeMap<String, Quantity>,
    /// The node's architecture and operating system, from the size and the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
    /// CapacityKnown: True once capacity and node info are read from metal-api, or why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Schema of a `corev1.ResourceList`: resource names to quantities, as Kubernetes writes them.
fn resource_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 16,
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": true,
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
        }
    })
}

/// The architecture and operating system a node made from a template would report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// CPU architecture: the size's `kubernetes.io/arch` label in metal-api, else `amd64`
    /// (metal-stack's machines are x86-64, and metal-api's sizes and images state no
    /// architecture).
    pub architecture: Architecture,
    /// Operating system of the node: `linux` for every metal-stack machine image.
    pub operating_system: OperatingSystem,
}

/// The CPU architectures Cluster API's node info names.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    JsonSchema,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Architecture {
    Amd64,
    Arm64,
    S390x,
    Ppc64le,
}

/// The operating systems Cluster API's node info names.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OperatingSystem {
    Linux,
    Windows,
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
