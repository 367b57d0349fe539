//! MetalStackMachine: one metal-stack machine of a Cluster API Machine.

use super::common::{Initialization, MachineAddress, conditions_schema, patterns};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MetalStackMachine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackMachine",
    namespaced,
    status = "MetalStackMachineStatus",
    shortname = "msm",
    shortname = "msmachine",
    category = "cluster-api",
    doc = "MetalStackMachine is the metal-stack machine behind a Cluster API Machine: capms allocates it with the Machine's bootstrap data and frees it on deletion.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster this machine belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "boolean",
        json_path = ".status.ready",
        description = "Machine is allocated and has phoned home"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "metal-stack machine"
    ),
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.machineType",
        description = "metal-stack size"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        description = "Operating system image",
        priority = 1
    ),
    printcolumn(
        name = "Partition",
        type_ = "string",
        json_path = ".spec.partition",
        description = "metal-stack partition",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(oldSelf.partition) || (has(self.partition) && self.partition == oldSelf.partition)", "message": "partition is immutable once set", "fieldPath": ".partition"},
    {"rule": "!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)", "message": "providerID is immutable once set", "fieldPath": ".providerID"}
]))]
pub struct MetalStackMachineSpec {
    /// Operating system image, as metal-api resolves it: an exact image ID, or a name with a
    /// shorter version (`ubuntu-cloud-init-20.04`) that resolves to the newest matching image.
    /// The image must have the `machine` feature.
    #[schemars(length(min = 1, max = 256))]
    pub image: String,
    /// metal-stack size (machine type), for example `v1-small-x86`.
    #[schemars(length(min = 1, max = 128))]
    pub machine_type: String,
    /// metal-stack partition to allocate in. Defaults to the cluster's partition. Immutable once
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub partition: Option<String>,
    /// The metal-stack machine behind this object. Set it beforehand to deploy onto that very
    /// machine (`metalstack://<uuid>` or `metal://<partition>/<uuid>`, kept as written);
    /// otherwise capms writes `metal://<partition>/<uuid>` of the machine it allocated.
    /// Immutable once set.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512), regex(pattern = patterns::PROVIDER_ID))]
    pub provider_id: Option<String>,
    /// Public SSH keys allowed to log in to the machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 16384)))]
    pub ssh_keys: Vec<String>,
    /// Extra metal-api tags put on the machine, besides the ones capms sets itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    pub tags: Vec<String>,
}

/// Observed state of a MetalStackMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackMachineStatus {
    /// True once the machine is allocated and has phoned home (Cluster API v1beta1 contract).
    #[serde(default)]
    pub ready: bool,
    /// Initialization progress (Cluster API v1beta2 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Addresses of the machine: InternalIP from the private network, ExternalIP from external
    /// networks, Hostname and InternalDNS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub addresses: Vec<MachineAddress>,
    /// The rack the machine stands in (Cluster API v1beta2 contract): Cluster API shows it on
    /// the Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Current state, one condition per step: Ready, Paused, MachineAllocated, MachineHealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Machine-readable reason of a failure that needs a person (deprecated v1beta1 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub failure_reason: Option<String>,
    /// Human-readable explanation of a failure that needs a person (deprecated v1beta1 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10240))]
    pub failure_message: Option<String>,
}
