//! MetalStackCluster as the Go provider defines it.

use super::NamedReference;
use crate::api::common::{Initialization, conditions_schema};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MetalStackCluster (`v1alpha1`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "MetalStackCluster",
    namespaced,
    status = "ClusterStatus",
    doc = "MetalStackCluster is the metal-stack infrastructure of a Cluster API cluster, as metal-stack's Go provider describes it.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this MetalStackCluster belongs"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "Control plane API endpoint"
    ),
    printcolumn(
        name = "Partition",
        type_ = "string",
        json_path = ".spec.partition",
        description = "The partition within metal-stack",
        priority = 1
    ),
    printcolumn(
        name = "Project",
        type_ = "string",
        json_path = ".spec.projectID",
        description = "The project within metal-stack",
        priority = 1
    ),
    printcolumn(
        name = "Network",
        type_ = "string",
        json_path = ".spec.nodeNetworkID",
        description = "The network within metal-stack",
        priority = 1
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "string",
        json_path = ".status.initialization.provisioned",
        description = "MetalStackCluster is ready"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Uptime of the cluster"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MetalStackClusterSpec {
    /// Endpoint of the cluster's API server. Left empty, capms sets it to controlPlaneIP, port
    /// 443; without controlPlaneIP, to the IP it allocates, port 6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ControlPlaneEndpoint>,
    /// metal-stack project that owns every resource of the cluster.
    #[serde(rename = "projectID")]
    pub project_id: String,
    /// Private node network of the cluster. Used when given; otherwise capms allocates one and
    /// writes its ID here.
    #[serde(
        default,
        rename = "nodeNetworkID",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_network_id: Option<String>,
    /// IP of the API server, used as given and never freed by capms. Left empty (and the
    /// endpoint's host too), capms allocates an ephemeral IP in the default network.
    #[serde(
        default,
        rename = "controlPlaneIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub control_plane_ip: Option<String>,
    /// metal-stack partition the cluster lives in.
    pub partition: String,
    /// A MetalStackFirewallDeployment in this namespace: the cluster's firewall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_deployment_ref: Option<NamedReference>,
}

/// Endpoint of an API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ControlPlaneEndpoint {
    /// Host name or IP address the API server serves on.
    pub host: String,
    /// Port the API server serves on.
    #[schemars(schema_with = "super::integer")]
    pub port: i32,
}

/// Observed state of a MetalStackCluster (`v1alpha1`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// `ready` defaults to false, yet the contract has it required, as the Go provider's CRD does.
#[schemars(extend("required" = ["ready"]))]
pub struct ClusterStatus {
    /// True once the infrastructure is ready (Cluster API v1beta1 contract).
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
}
