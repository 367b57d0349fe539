//! MetalStackMachine and MetalStackMachineTemplate as the Go provider defines them.

use crate::api::common::{Initialization, MachineAddress, conditions_schema};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MetalStackMachine (`v1alpha1`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalStackMachine",
    namespaced,
    status = "MachineStatus",
    doc = "MetalStackMachine is one metal-stack machine of a Cluster API Machine, as metal-stack's Go provider describes it.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this MetalStackMachine belongs"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "ProviderID reference for the MetalStackMachine"
    ),
    printcolumn(
        name = "Size",
        type_ = "string",
        json_path = ".spec.size",
        description = "Size of the MetalStackMachine",
        priority = 1
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        description = "OS image of the MetalStackMachine"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "string",
        json_path = ".status.initialization.provisioned",
        description = "MetalStackCluster is ready"
    ),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[1].status",
        description = "Health of the provider machine"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackMachineSpec {
    /// The metal-stack machine behind this object, `metal://<partition>/<machine-id>`. Set it
    /// beforehand to deploy onto that very machine; otherwise capms writes the one it allocated.
    /// The Go provider writes an empty string when there is none.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Operating system image to deploy on the machine.
    pub image: String,
    /// metal-stack size (machine type) of the machine.
    pub size: String,
}

/// Observed state of a MetalStackMachine (`v1alpha1`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// `ready` defaults to false, yet the contract has it required, as the Go provider's CRD does.
#[schemars(extend("required" = ["ready"]))]
pub struct MachineStatus {
    /// True once the machine has phoned home (Cluster API v1beta1 contract).
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub ready: bool,
    /// Initialization progress (Cluster API v1beta2 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Machine-readable reason of a failure that needs a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Human-readable explanation of a failure that needs a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Current state, one condition per step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The machine's host name and its addresses in the node network and external networks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "atomic"))]
    pub addresses: Vec<MachineAddress>,
}

/// Desired state of a MetalStackMachineTemplate (`v1alpha1`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalStackMachineTemplate",
    namespaced,
    doc = "MetalStackMachineTemplate describes the MetalStackMachines of a MachineDeployment or control plane, as metal-stack's Go provider describes it.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Size",
        type_ = "string",
        json_path = ".spec.template.spec.size",
        description = "Size of the MetalStackMachine"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.template.spec.image",
        description = "OS image of the MetalStackMachine"
    )
)]
pub struct MetalStackMachineTemplateSpec {
    /// The MetalStackMachine to create: only its spec is read.
    pub template: MachineTemplateObject,
}

/// A whole MetalStackMachine inside a template, as the Go provider's template holds it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateObject {
    /// Ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Ignored: an object without properties, so the apiserver keeps none of its fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::object")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Spec of the MetalStackMachines created from the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<MetalStackMachineSpec>,
    /// Ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MachineStatus>,
}
