//! Types shared by several kinds, and the facts every kind of ours has in common.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// API group of every kind capms serves.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The version objects are stored in.
pub(crate) const STORAGE_VERSION: &str = "v1alpha4";
/// Served for manifests written against the first metal-stack provider; same schema, no conversion.
pub(crate) const LEGACY_VERSION: &str = "v1alpha3";
/// Where the install manifests' webhooks live: the namespace and Service in front of the
/// manager's webhook port, and the cert-manager Certificate whose CA is injected.
pub(crate) const WEBHOOK_NAMESPACE: &str = "capms-system";
pub(crate) const WEBHOOK_SERVICE: &str = "capms-webhook-service";
pub(crate) const SERVING_CERT: &str = "capms-system/capms-serving-cert";
/// The ServiceAccount the installed manager runs as, in [`WEBHOOK_NAMESPACE`].
pub(crate) const MANAGER_SERVICE_ACCOUNT: &str = "capms-manager";
/// Path of the conversion webhook on the webhook server.
pub const CONVERSION_PATH: &str = "/convert";
/// Port of the control-plane endpoint when the spec does not name one.
pub(crate) const DEFAULT_API_PORT: i32 = 6443;
/// Label that marks every object capms ships, as clusterctl expects.
pub(crate) const PROVIDER_LABEL: (&str, &str) =
    ("cluster.x-k8s.io/provider", "infrastructure-metal-stack");

/// Endpoint of the workload cluster's API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct ApiEndpoint {
    /// Host name or IP address of the API server. Left empty, capms allocates an IP in the
    /// public network and writes it here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub host: Option<String>,
    /// TCP port of the API server. Defaults to 6443.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// A failure domain as the Cluster API v1beta2 contract lists it: for capms, a rack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// The rack's id in metal-api.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Whether control-plane machines may be placed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// More about the failure domain: its partition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// Initialization progress, as the Cluster API v1beta2 contract reads it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct Initialization {
    /// True once the infrastructure is fully provisioned. Cluster API copies this to the owning
    /// Cluster or Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// Kind of a machine address, as Cluster API defines them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MachineAddressType {
    Hostname,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

/// One address of a machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct MachineAddress {
    /// Kind of address: Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,
    /// The address itself: an IP address or a host name.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// Labels and annotations given to objects created from a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TemplateMeta {
    /// Labels put on every object created from this template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on every object created from this template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Names an object of a known kind in the referring object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the object (in the same namespace).
    #[schemars(length(min = 1, max = 253), regex(pattern = patterns::DNS_SUBDOMAIN))]
    pub name: String,
}

/// Schema of a `conditions` list: `[]metav1.Condition` as a list-map keyed by `type`, so that
/// server-side apply merges conditions one by one, capped at 32 entries.
pub(crate) fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema.insert("maxItems".into(), 32.into());
    schema
}

/// Patterns the schema enforces; kept here so webhooks and tests use the same text.
pub(crate) mod patterns {
    /// A UUID as metal-stack uses for projects and machines.
    pub const UUID: &str =
        r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
    /// Both providerID forms capms accepts: `metalstack://<uuid>` (first metal-stack provider)
    /// and `metal://<partition>/<uuid>` (what capms writes, and what metal-ccm sets on Nodes).
    pub(crate) const PROVIDER_ID: &str = r"^(metalstack://|metal://[A-Za-z0-9][A-Za-z0-9._-]*/)[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
    /// A Kubernetes object name (DNS-1123 subdomain).
    pub(crate) const DNS_SUBDOMAIN: &str =
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    /// A metal-stack firewall rule comment: letters, `_`, `-` and space, no digits.
    pub(crate) const RULE_COMMENT: &str = r"^[A-Za-z_ -]*$";
}
