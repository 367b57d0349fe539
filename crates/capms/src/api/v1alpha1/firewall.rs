//! MetalStackFirewallDeployment and MetalStackFirewallTemplate as the Go provider defines them;
//! the template's spec is the firewall-controller-manager's FirewallSpec.

use super::NamedReference;
use crate::api::common::{Initialization, conditions_schema};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MetalStackFirewallDeployment (`v1alpha1`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalStackFirewallDeployment",
    namespaced,
    status = "FirewallDeploymentStatus",
    shortname = "msfwdeploy",
    category = "cluster-api",
    doc = "MetalStackFirewallDeployment is the firewall of a MetalStackCluster, made from a MetalStackFirewallTemplate.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this MetalStackCluster belongs"
    ),
    printcolumn(
        name = "Template",
        type_ = "string",
        json_path = ".spec.firewallTemplateRef.name",
        description = "Name of the MetalStackFirewallTemplate used"
    ),
    printcolumn(
        name = "Deployment",
        type_ = "string",
        json_path = ".spec.managedResourceRef.name",
        description = "Name of the managed FirewallDeployment"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "string",
        json_path = ".status.initialization.provisioned",
        description = "Indicates if the MetalStackFirewallDeployment has been initialized"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Age of the MetalStackFirewallDeployment"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackFirewallDeploymentSpec {
    /// The MetalStackFirewallTemplate in this namespace the firewall is made from.
    pub firewall_template_ref: NamedReference,
    /// The firewall in metal-stack, `metal://<partition>/<machine-id>`, written by capms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_resource_ref: Option<NamedReference>,
    /// What is updated without being asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_update: Option<AutoUpdate>,
}

/// Automatic updates of a firewall.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoUpdate {
    /// Replace the firewall when a newer image of its template's image name appears.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_image: Option<bool>,
}

/// Observed state of a MetalStackFirewallDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// `ready` defaults to false, yet the contract has it required, as the Go provider's CRD does.
#[schemars(extend("required" = ["ready"]))]
pub struct FirewallDeploymentStatus {
    /// True once the firewall is allocated.
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub ready: bool,
    /// Initialization progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Current state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// A firewall blueprint (`v1alpha1`): the firewall-controller-manager's FirewallSpec.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalStackFirewallTemplate",
    namespaced,
    shortname = "msfwtemplate",
    category = "cluster-api",
    doc = "MetalStackFirewallTemplate is a firewall blueprint that MetalStackFirewallDeployments name.",
    printcolumn(
        name = "Partition",
        type_ = "string",
        json_path = ".spec.partition",
        description = "The Metal Stack partition where the firewall will be created"
    ),
    printcolumn(
        name = "Project",
        type_ = "string",
        json_path = ".spec.project",
        description = "The Metal Stack project where the firewall will be created"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        description = "The Metal Stack firewall image"
    ),
    printcolumn(
        name = "Size",
        type_ = "string",
        json_path = ".spec.size",
        description = "The Metal Stack firewall size"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "The age of the firewall template"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackFirewallTemplateSpec {
    /// Firewall image. Changing it replaces the firewall.
    pub image: String,
    /// metal-stack size of the firewall. Changing it replaces the firewall.
    pub size: String,
    /// Networks the firewall is attached to besides the cluster's node network.
    pub networks: Vec<String>,
    /// Partition of the firewall; capms allocates in the cluster's.
    pub partition: String,
    /// Project of the firewall; capms allocates in the cluster's.
    pub project: String,
    /// The rules the firewall starts with. capms requires them: a firewall without rules lets
    /// nothing through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_rule_set: Option<RuleSet>,
    /// Public SSH keys allowed to log in to the firewall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_keys: Option<Vec<String>>,
    /// Networks the firewall-controller lets through when network access is forbidden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_networks: Option<AllowedNetworks>,
    /// Download URL of the firewall-controller (read by the firewall-controller-manager).
    #[serde(
        default,
        rename = "controllerURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub controller_url: Option<String>,
    /// firewall-controller version (read by the firewall-controller-manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_version: Option<String>,
    /// Port of the firewall's DNS proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::integer")]
    pub dns_port: Option<i64>,
    /// DNS server the firewall's DNS proxy uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_server_address: Option<String>,
    /// Do not apply firewall rules (development only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Source-NAT rules per network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_rules: Option<Vec<EgressRuleSnat>>,
    /// Prefixes counted as internal traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_prefixes: Option<Vec<String>>,
    /// How often the firewall-controller reconciles its rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Where the firewall-controller writes its IPv4 rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_rule_file: Option<String>,
    /// Log accepted connections too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_accepted_connections: Option<bool>,
    /// Download URL of the nftables exporter.
    #[serde(
        default,
        rename = "nftablesExporterURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub nftables_exporter_url: Option<String>,
    /// nftables exporter version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nftables_exporter_version: Option<String>,
    /// Rate limits per network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<Vec<RateLimit>>,
    /// User data of the firewall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userdata: Option<String>,
    /// User data as separate files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userdata_contents: Option<Vec<UserdataContent>>,
}

/// A firewall's initial rules.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RuleSet {
    /// Rules for outgoing traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<EgressRule>>,
    /// Rules for incoming traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Vec<IngressRule>>,
}

/// Outgoing traffic the firewall lets through.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EgressRule {
    /// What the rule is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Destination ports.
    pub ports: Vec<i32>,
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// Destination CIDRs.
    pub to: Vec<String>,
}

/// Incoming traffic the firewall lets through.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct IngressRule {
    /// What the rule is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Source CIDRs.
    pub from: Vec<String>,
    /// Destination ports.
    pub ports: Vec<i32>,
    /// `TCP` or `UDP`.
    pub protocol: String,
}

/// Networks allowed through when network access is forbidden.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct AllowedNetworks {
    /// CIDRs allowed for outgoing traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
    /// CIDRs allowed for incoming traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Vec<String>>,
}

/// A Source-NAT rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressRuleSnat {
    /// Network the rule applies to.
    #[serde(rename = "networkID")]
    pub network_id: String,
    /// Source addresses of packets leaving the network.
    pub ips: Vec<String>,
}

/// A rate limit of one network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RateLimit {
    /// Network that is rate limited.
    #[serde(rename = "networkID")]
    pub network_id: String,
    /// Input rate in MiB/s.
    pub rate: i32,
}

/// A file of the firewall's user data.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserdataContent {
    /// Path of the file.
    pub path: String,
    /// Its content, given directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Where its content comes from otherwise (required by the firewall-controller-manager's
    /// schema even beside content).
    pub content_from: ContentFrom,
}

/// The source of a user-data file.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentFrom {
    /// A key of a ConfigMap.
    pub config_map_key_ref: KeyRef,
    /// A key of a Secret.
    pub secret_key_ref: KeyRef,
    /// The firewall-controller's kubeconfig Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_controller_kubeconfig_secret: Option<KeyRef>,
}

/// A key of a ConfigMap or Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct KeyRef {
    /// Name of the ConfigMap or Secret.
    pub name: String,
    /// The key in it.
    pub key: String,
}
