//! MetalStackCluster: the infrastructure of one Cluster API cluster on metal-stack.

use super::common::{
    ApiEndpoint, FailureDomain, Initialization, LocalObjectReference, conditions_schema, patterns,
};
use super::firewall::MetalStackFirewallSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MetalStackCluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha4",
    kind = "MetalStackCluster",
    namespaced,
    status = "MetalStackClusterStatus",
    shortname = "msc",
    shortname = "mscluster",
    category = "cluster-api",
    doc = "MetalStackCluster is the metal-stack infrastructure of a Cluster API cluster: its private network, its control-plane IP and its firewall.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster this infrastructure belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "boolean",
        json_path = ".status.ready",
        description = "Network, control-plane IP and firewall are ready"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "Control-plane endpoint host"
    ),
    printcolumn(
        name = "Partition",
        type_ = "string",
        json_path = ".spec.partition",
        description = "metal-stack partition"
    ),
    printcolumn(
        name = "Firewall",
        type_ = "string",
        json_path = ".status.firewall.serving",
        description = "The MetalStackFirewall serving the private network"
    ),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        json_path = ".status.firewall.phase",
        description = "Stable, RollingOut or Failed: the firewall's rollout"
    ),
    printcolumn(
        name = "Project",
        type_ = "string",
        json_path = ".spec.projectID",
        description = "metal-stack project",
        priority = 1
    ),
    printcolumn(
        name = "Network",
        type_ = "string",
        json_path = ".status.networkID",
        description = "Private network of the cluster",
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
    {"rule": "[has(self.firewallSpec), has(self.firewallTemplateRef), has(self.firewallDeploymentRef)].filter(x, x).size() <= 1", "message": "set at most one of firewallSpec, firewallTemplateRef and firewallDeploymentRef", "fieldPath": ".firewallTemplateRef"}
]))]
pub struct MetalStackClusterSpec {
    /// Endpoint of the cluster's API server. Leave the host empty to have capms allocate an IP in
    /// the public network; a host inside the public network is reserved as a static IP. The port
    /// defaults to 6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// metal-stack partition (data center) the cluster's machines and networks live in.
    /// Immutable.
    #[schemars(length(min = 1, max = 128), extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "partition is immutable"}]))]
    pub partition: String,
    /// metal-stack project (a UUID) that owns every resource of the cluster. Immutable.
    #[serde(rename = "projectID")]
    #[schemars(length(min = 36, max = 36), regex(pattern = patterns::UUID), extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "projectID is immutable"}]))]
    pub project_id: String,
    /// External metal-api network (for example the internet network) the control-plane IP is
    /// allocated in; the firewall joins it too. Left empty, the control-plane IP comes from the
    /// network metal-api labels `network.metal-stack.io/default`, and the firewall joins only
    /// the networks its spec names.
    #[serde(
        default,
        rename = "publicNetworkID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 128))]
    pub public_network_id: Option<String>,
    /// An IP address already allocated in metal-api (for example a static IP made with
    /// metalctl) to serve the cluster's API server at. Used as the endpoint's host when
    /// controlPlaneEndpoint names none, and never freed by capms. Written in v1alpha1 (the Go
    /// provider's API), the endpoint's port then defaults to 443, as the Go provider has it.
    #[serde(
        default,
        rename = "controlPlaneIP",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 64))]
    pub control_plane_ip: Option<String>,
    /// Private network to put the cluster's machines in. Leave empty to have capms allocate one
    /// in the partition. A network given here is freed with the cluster only when it carries
    /// the label `cluster.metal-stack.io/id=<namespace>.<name>` of this cluster, as networks a
    /// provider allocated for it do (the Go provider's, when capms takes its clusters over);
    /// otherwise capms never frees it.
    #[serde(
        default,
        rename = "privateNetworkID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 128))]
    pub private_network_id: Option<String>,
    /// The cluster's firewall. capms creates a MetalStackFirewall with this spec. Leave empty
    /// (and firewallTemplateRef too) for a cluster without a firewall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_spec: Option<MetalStackFirewallSpec>,
    /// A MetalStackFirewallTemplate in this namespace to create the cluster's firewall from,
    /// instead of an inline firewallSpec: one set of firewall rules shared by many clusters.
    /// Read when the firewall is created; the firewall waits until the template exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_template_ref: Option<LocalObjectReference>,
    /// A MetalStackFirewallDeployment in this namespace (the Go provider's API) whose
    /// firewallTemplateRef the cluster's firewall is made from, with the template's
    /// initialRuleSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_deployment_ref: Option<LocalObjectReference>,
    /// A Secret in this namespace holding the metal-api credentials capms uses for everything
    /// of this cluster: its network, IPs, firewalls and machines. It holds `url` and either
    /// `hmac` (with `hmacAuthType`: Metal-View, Metal-Edit or Metal-Admin; default Metal-Edit)
    /// or `token` (a bearer token). Left empty, capms uses its own credentials (the manager's
    /// METAL_API_* settings). A change of the Secret's contents is taken up within a minute,
    /// without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_ref: Option<LocalObjectReference>,
}

/// Observed state of a MetalStackCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackClusterStatus {
    /// True once network, control-plane IP and firewall are ready (Cluster API v1beta1 contract).
    #[serde(default)]
    pub ready: bool,
    /// Initialization progress (Cluster API v1beta2 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Current state, one condition per step: Ready, Paused, NetworkReady, ControlPlaneIPReady,
    /// FirewallReady, FirewallRolledOut.
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
    /// The private network in use: the one given in spec.privateNetworkID, or the one capms
    /// allocated.
    #[serde(default, rename = "networkID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub network_id: Option<String>,
    /// ID of the private network capms allocated itself; only this network is freed on deletion.
    #[serde(
        default,
        rename = "allocatedNetworkID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 128))]
    pub allocated_network_id: Option<String>,
    /// Control-plane IP capms allocated itself in metal-api; only this IP is freed on deletion.
    #[serde(
        default,
        rename = "allocatedControlPlaneIP",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 64))]
    pub allocated_control_plane_ip: Option<String>,
    /// The cluster's firewalls: the one serving, the one rolling in for a changed firewall spec,
    /// and the rollout's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<FirewallRolloutStatus>,
    /// The racks of the partition Cluster API may place machines in (Cluster API v1beta2
    /// contract): those holding a free machine of a size the cluster's machines and the machine
    /// templates of its namespace use, or a machine of the cluster. Kept current as racks fill
    /// and empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub failure_domains: Vec<FailureDomain>,
}

/// The firewalls of a cluster. A changed firewall spec rolls the firewall: capms creates a
/// MetalStackFirewall for the new spec and deletes the serving one only once the new one is
/// ready, so the private network always has a ready firewall.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirewallRolloutStatus {
    /// The ready MetalStackFirewall serving the private network, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub serving: Option<String>,
    /// The MetalStackFirewall of the current firewall spec while it is not ready yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub rolling_in: Option<String>,
    /// Stable: the serving firewall has the current spec. RollingOut: a firewall for the current
    /// spec is on its way. Failed: the last one did not become ready in time; capms retries.
    #[serde(default)]
    pub phase: RolloutPhase,
    /// The MetalStackFirewall whose rollout failed last (named after its spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub last_failed: Option<String>,
    /// How often rolling in that firewall failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(max = 1000))]
    pub failed_attempts: u32,
    /// When the last attempt failed; the next one waits out a backoff from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Why the last attempt failed: the firewall and its last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10240))]
    pub last_failure: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The phase of a firewall rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// The firewall has the current spec (or is being made for the first time).
    #[default]
    Stable,
    /// A firewall for the current spec is being made; the serving one stays until it is ready.
    RollingOut,
    /// The firewall for the current spec did not become ready in time and was freed; the
    /// serving one stays. capms tries again after a backoff.
    Failed,
}
