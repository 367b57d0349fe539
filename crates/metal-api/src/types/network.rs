//! Networks and IPs.

use super::*;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct Consumption {
    pub available_ips: u64,
    pub used_ips: u64,
    pub available_prefixes: u64,
    pub used_prefixes: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct NetworkConsumption {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Consumption>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Consumption>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Network {
    pub id: String,
    pub name: String,
    pub description: String,
    pub partitionid: String,
    pub projectid: String,
    pub labels: Labels,
    pub shared: bool,
    pub prefixes: Vec<String>,
    pub destinationprefixes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defaultchildprefixlength: Option<BTreeMap<String, u8>>,
    pub nat: bool,
    pub privatesuper: bool,
    pub underlay: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vrf: Option<u32>,
    pub vrfshared: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parentnetworkid: Option<String>,
    pub networktype: String,
    pub nattype: String,
    pub consumption: NetworkConsumption,
    /// Deprecated copy of `consumption.ipv4` that metal-api still sends (required in its spec).
    pub usage: Consumption,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            partitionid: String::new(),
            projectid: String::new(),
            labels: Labels::new(),
            shared: false,
            prefixes: Vec::new(),
            destinationprefixes: Vec::new(),
            defaultchildprefixlength: None,
            nat: false,
            privatesuper: false,
            underlay: false,
            vrf: None,
            vrfshared: false,
            parentnetworkid: None,
            networktype: String::new(),
            nattype: "none".into(),
            consumption: NetworkConsumption::default(),
            usage: Consumption::default(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

/// `networktype` values.
pub mod network_type {
    pub const EXTERNAL: &str = "external";
    pub const UNDERLAY: &str = "underlay";
    pub const SUPER: &str = "super";
    pub const CHILD: &str = "child";
    pub const CHILD_SHARED: &str = "child-shared";
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct NetworkAllocateRequest {
    pub projectid: String,
    pub partitionid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinationprefixes: Vec<String>,
    #[serde(default)]
    pub nat: bool,
    #[serde(default)]
    pub shared: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addressfamily: Option<String>,
    /// Child prefix length per address family (`{"IPv4": 24}`), overriding the super network's
    /// default.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub length: BTreeMap<String, u8>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct NetworkFindRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitionid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projectid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parentnetworkid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privatesuper: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<u32>,
}

pub const IP_TYPE_EPHEMERAL: &str = "ephemeral";
pub const IP_TYPE_STATIC: &str = "static";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Ip {
    pub ipaddress: String,
    pub allocationuuid: String,
    pub name: String,
    pub description: String,
    pub networkid: String,
    pub projectid: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub tags: Vec<String>,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Ip {
    fn default() -> Self {
        Ip {
            ipaddress: String::new(),
            allocationuuid: String::new(),
            name: String::new(),
            description: String::new(),
            networkid: String::new(),
            projectid: String::new(),
            type_: IP_TYPE_EPHEMERAL.into(),
            tags: Vec::new(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

impl Ip {
    /// An IP tagged with a machine id belongs to that machine and cannot be freed directly.
    pub fn has_machine_scope(&self) -> bool {
        self.tags
            .iter()
            .any(|t| t.starts_with(crate::tags::MACHINE_ID))
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct IpAllocateRequest {
    pub networkid: String,
    pub projectid: String,
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machineid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addressfamily: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct IpFindRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipaddress: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocationuuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networkid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projectid: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machineid: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}
