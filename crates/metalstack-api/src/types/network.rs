//! `NetworkService`'s and `IPService`'s messages: a cluster's private network and its IPs.

use super::{Labels, Meta};
use serde::{Deserialize, Serialize};

rpc!("NetworkService", "Create", NetworkServiceCreateRequest => NetworkServiceCreateResponse);
rpc!("NetworkService", "Delete", NetworkServiceDeleteRequest => NetworkServiceDeleteResponse);
rpc!("NetworkService", "List", NetworkServiceListRequest => NetworkServiceListResponse);
rpc!("NetworkService", "ListBaseNetworks", NetworkServiceListBaseNetworksRequest => NetworkServiceListBaseNetworksResponse);
rpc!("NetworkService", "Get", NetworkServiceGetRequest => NetworkServiceGetResponse);
rpc!("IPService", "Get", IPServiceGetRequest => IPServiceGetResponse);
rpc!("IPService", "Create", IPServiceCreateRequest => IPServiceCreateResponse);
rpc!("IPService", "Delete", IPServiceDeleteRequest => IPServiceDeleteResponse);
rpc!("IPService", "List", IPServiceListRequest => IPServiceListResponse);

/// `metalstack.api.v2.Network`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub id: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub destination_prefixes: Vec<String>,
    #[serde(default)]
    pub default_child_prefix_length: Option<ChildPrefixLength>,
    #[serde(default, rename = "type")]
    pub type_: NetworkType,
    #[serde(default)]
    pub nat_type: NATType,
    #[serde(default)]
    pub vrf: Option<u32>,
    #[serde(default)]
    pub parent_network: Option<String>,
}

/// `metalstack.api.v2.NATType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum NATType {
    #[serde(rename = "NAT_TYPE_NONE")]
    None,
    #[serde(rename = "NAT_TYPE_IPV4_MASQUERADE")]
    Ipv4Masquerade,
    #[default]
    #[serde(rename = "NAT_TYPE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.NetworkType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkType {
    #[serde(rename = "NETWORK_TYPE_EXTERNAL")]
    External,
    #[serde(rename = "NETWORK_TYPE_UNDERLAY")]
    Underlay,
    #[serde(rename = "NETWORK_TYPE_SUPER")]
    Super,
    #[serde(rename = "NETWORK_TYPE_SUPER_NAMESPACED")]
    SuperNamespaced,
    #[serde(rename = "NETWORK_TYPE_CHILD")]
    Child,
    #[serde(rename = "NETWORK_TYPE_CHILD_SHARED")]
    ChildShared,
    #[default]
    #[serde(rename = "NETWORK_TYPE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.NetworkAddressFamily`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkAddressFamily {
    #[serde(rename = "NETWORK_ADDRESS_FAMILY_V4")]
    V4,
    #[serde(rename = "NETWORK_ADDRESS_FAMILY_V6")]
    V6,
    #[serde(rename = "NETWORK_ADDRESS_FAMILY_DUAL_STACK")]
    DualStack,
}

/// `metalstack.api.v2.NetworkQuery`: what capms asks by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<NetworkType>,
}

/// `metalstack.api.v2.NetworkServiceCreateRequest`: a child network of a super network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkServiceCreateRequest {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_network: Option<String>,
    /// The prefix length of the child network; the super network's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<ChildPrefixLength>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_family: Option<NetworkAddressFamily>,
}

/// `metalstack.api.v2.ChildPrefixLength`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildPrefixLength {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<u32>,
}

/// `metalstack.api.v2.NetworkServiceCreateResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceCreateResponse {
    pub network: Network,
}

/// `metalstack.api.v2.NetworkServiceGetRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceGetRequest {
    pub id: String,
    pub project: String,
}

/// `metalstack.api.v2.NetworkServiceGetResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceGetResponse {
    pub network: Network,
}

/// `metalstack.api.v2.NetworkServiceDeleteRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceDeleteRequest {
    pub id: String,
    pub project: String,
}

/// `metalstack.api.v2.NetworkServiceDeleteResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceDeleteResponse {
    pub network: Network,
}

/// `metalstack.api.v2.NetworkServiceListRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceListRequest {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<NetworkQuery>,
}

/// `metalstack.api.v2.NetworkServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceListResponse {
    #[serde(default)]
    pub networks: Vec<Network>,
}

/// `metalstack.api.v2.NetworkServiceListBaseNetworksRequest`: the networks a project may take
/// a child of or attach to (super and external networks).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceListBaseNetworksRequest {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<NetworkQuery>,
}

/// `metalstack.api.v2.NetworkServiceListBaseNetworksResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkServiceListBaseNetworksResponse {
    #[serde(default)]
    pub networks: Vec<Network>,
}

/// `metalstack.api.v2.IP`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IP {
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    pub ip: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub network: String,
    #[serde(default)]
    pub project: String,
    #[serde(default, rename = "type")]
    pub type_: IPType,
}

/// `metalstack.api.v2.IPType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum IPType {
    #[serde(rename = "IP_TYPE_EPHEMERAL")]
    Ephemeral,
    #[serde(rename = "IP_TYPE_STATIC")]
    Static,
    #[default]
    #[serde(rename = "IP_TYPE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.IPServiceCreateRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceCreateRequest {
    pub network: String,
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// This address, rather than any of the network's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<IPType>,
}

/// `metalstack.api.v2.IPServiceCreateResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceCreateResponse {
    pub ip: IP,
}

/// `metalstack.api.v2.IPServiceGetRequest`: by address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceGetRequest {
    pub ip: String,
    pub project: String,
}

/// `metalstack.api.v2.IPServiceGetResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceGetResponse {
    pub ip: IP,
}

/// `metalstack.api.v2.IPServiceDeleteRequest`: by address, not by uuid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceDeleteRequest {
    pub ip: String,
    pub project: String,
}

/// `metalstack.api.v2.IPServiceDeleteResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceDeleteResponse {
    pub ip: IP,
}

/// `metalstack.api.v2.IPQuery`: what capms asks by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
}

/// `metalstack.api.v2.IPServiceListRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceListRequest {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<IPQuery>,
}

/// `metalstack.api.v2.IPServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IPServiceListResponse {
    #[serde(default)]
    pub ips: Vec<IP>,
}
