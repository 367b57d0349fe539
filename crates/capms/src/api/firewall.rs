//! MetalStackFirewall: the firewall machine that guards a cluster's private network.

use super::common::{conditions_schema, patterns};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MetalStackFirewall: a firewall machine allocated in metal-api in the
/// cluster's partition and project, attached to the public and the cluster's private network.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackFirewall",
    namespaced,
    status = "MetalStackFirewallStatus",
    shortname = "msfw",
    category = "cluster-api",
    doc = "MetalStackFirewall is a firewall machine in metal-stack that guards a cluster's private network. MetalStackClusters create one from their firewallSpec.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster this firewall belongs to"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".metadata.labels.metal-stack\\.infrastructure\\.cluster\\.x-k8s\\.io/firewall-role",
        description = "Serving, RollingIn (on its way beside a serving one) or Provisioning (on its way while none serves)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "boolean",
        json_path = ".status.ready",
        description = "Firewall is allocated and has phoned home"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "metal-stack machine of the firewall"
    ),
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.machineType",
        description = "metal-stack size",
        priority = 1
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        description = "Firewall image",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackFirewallSpec {
    /// Firewall image, as metal-api resolves it: an exact image ID, or a name with a shorter
    /// version (`firewall-ubuntu-2.0`) that resolves to the newest matching image. The image
    /// must have the `firewall` feature.
    #[schemars(length(min = 1, max = 256))]
    pub image: String,
    /// metal-stack size (machine type) of the firewall, for example `v1-small-x86`.
    #[schemars(length(min = 1, max = 128))]
    pub machine_type: String,
    /// Deploy onto this very machine instead of any free one of the size:
    /// `metalstack://<machine-uuid>` or `metal://<partition>/<machine-uuid>`. Kept as written.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512), regex(pattern = patterns::PROVIDER_ID))]
    pub provider_id: Option<String>,
    /// Public SSH keys allowed to log in to the firewall.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 16384)))]
    pub ssh_keys: Vec<String>,
    /// Initial firewall rules, as metal-api applies them at allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<FirewallRules>,
    /// Further metal-api networks to attach, besides the cluster's public and private network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 128)))]
    pub networks: Vec<String>,
}

/// Observed state of a MetalStackFirewall.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackFirewallStatus {
    /// True once the firewall is allocated, has phoned home and is alive.
    #[serde(default)]
    pub ready: bool,
    /// ID of the metal-stack machine capms allocated for this firewall; it frees exactly this
    /// machine on deletion.
    #[serde(default, rename = "machineID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub machine_id: Option<String>,
    /// Current state, one condition per step: Ready, Paused, FirewallAllocated, FirewallHealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Firewall rules applied when the firewall is allocated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct FirewallRules {
    /// Traffic allowed out of the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub egress: Vec<EgressRule>,
    /// Traffic allowed into the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub ingress: Vec<IngressRule>,
}

/// Transport protocol of a firewall rule.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
}

/// Outgoing traffic to allow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EgressRule {
    /// Protocol: `tcp` (the default) or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Destination ports, 0 to 65535.
    #[schemars(length(min = 1, max = 256), inner(range(min = 0, max = 65535)))]
    pub ports: Vec<i32>,
    /// Destination networks as CIDRs, all of one address family.
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = 64)))]
    pub to: Vec<String>,
    /// Why the rule exists: letters, `_`, `-` and spaces only (metal-api refuses digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), regex(pattern = patterns::RULE_COMMENT))]
    pub comment: Option<String>,
}

/// Incoming traffic to allow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct IngressRule {
    /// Protocol: `tcp` (the default) or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Destination ports, 0 to 65535.
    #[schemars(length(min = 1, max = 256), inner(range(min = 0, max = 65535)))]
    pub ports: Vec<i32>,
    /// Source networks as CIDRs, all of one address family.
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = 64)))]
    pub from: Vec<String>,
    /// Destination networks as CIDRs; empty means every address behind the firewall.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 64)))]
    pub to: Vec<String>,
    /// Why the rule exists: letters, `_`, `-` and spaces only (metal-api refuses digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), regex(pattern = patterns::RULE_COMMENT))]
    pub comment: Option<String>,
}
