//! metal-api v1 wire types (JSON field names as metal-api writes them), shared by the client
//! and the simulator. Responses decode leniently: every field has a default, unknown fields are
//! ignored, as Go's encoding/json does.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

fn epoch() -> Timestamp {
    Timestamp::UNIX_EPOCH
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct BootConfig {
    pub imageurl: String,
    pub kernelurl: String,
    pub commandline: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Partition {
    pub id: String,
    pub name: String,
    pub description: String,
    pub bootconfig: BootConfig,
    pub mgmtserviceaddress: String,
    pub labels: Labels,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Partition {
    fn default() -> Self {
        Partition {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            bootconfig: BootConfig::default(),
            mgmtserviceaddress: String::new(),
            labels: Labels::new(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct SizeConstraint {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub min: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub max: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub identifier: String,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Size {
    pub id: String,
    pub name: String,
    pub description: String,
    pub constraints: Vec<SizeConstraint>,
    pub labels: Labels,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Size {
    fn default() -> Self {
        Size {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            constraints: Vec::new(),
            labels: Labels::new(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

/// Image feature that allows a machine allocation.
pub const FEATURE_MACHINE: &str = "machine";
/// Image feature that allows a firewall allocation.
pub const FEATURE_FIREWALL: &str = "firewall";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub description: String,
    pub url: String,
    pub features: Vec<String>,
    #[serde(rename = "expirationDate")]
    pub expiration_date: Timestamp,
    pub classification: String,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Image {
    fn default() -> Self {
        Image {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            url: String::new(),
            features: Vec::new(),
            expiration_date: epoch(),
            classification: "supported".into(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

impl Image {
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ProjectMeta {
    pub id: String,
    pub kind: String,
    pub apiversion: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct Project {
    pub meta: ProjectMeta,
    pub name: String,
    pub description: String,
    pub tenant_id: String,
}

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
    pub vrf: Option<u32>,
    pub vrfshared: bool,
    pub parentnetworkid: Option<String>,
    pub networktype: String,
    pub nattype: String,
    pub consumption: NetworkConsumption,
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
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
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
/// Tag prefix that gives an IP machine scope.
pub const MACHINE_ID_TAG: &str = "machine.metal-stack.io/id";

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
        self.tags.iter().any(|t| t.starts_with(MACHINE_ID_TAG))
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
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

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineCpu {
    pub vendor: String,
    pub model: String,
    pub cores: u32,
    pub threads: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineDisk {
    pub name: String,
    pub size: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineNic {
    pub mac: String,
    pub name: String,
    pub identifier: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineHardware {
    pub memory: u64,
    /// Always 0 in metal-api responses (never copied); read `cpus[].cores`.
    pub cpu_cores: u32,
    pub cpus: Vec<MachineCpu>,
    pub disks: Vec<MachineDisk>,
    pub nics: Vec<MachineNic>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineState {
    /// `""` (available), `RESERVED` or `LOCKED`.
    pub value: String,
    pub description: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct MachineEvent {
    pub time: Timestamp,
    pub event: String,
    pub message: String,
}

impl Default for MachineEvent {
    fn default() -> Self {
        MachineEvent {
            time: epoch(),
            event: String::new(),
            message: String::new(),
        }
    }
}

/// Event names of the machine lifecycle.
pub mod event {
    pub const PXE_BOOTING: &str = "PXE Booting";
    pub const PREPARING: &str = "Preparing";
    pub const REGISTERING: &str = "Registering";
    pub const WAITING: &str = "Waiting";
    pub const INSTALLING: &str = "Installing";
    pub const BOOTING_NEW_KERNEL: &str = "Booting New Kernel";
    pub const PHONED_HOME: &str = "Phoned Home";
    pub const MACHINE_RECLAIM: &str = "Machine Reclaim";
}

/// Liveliness values.
pub mod liveliness {
    pub const ALIVE: &str = "Alive";
    pub const DEAD: &str = "Dead";
    pub const UNKNOWN: &str = "Unknown";
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineEvents {
    /// Newest first.
    pub log: Vec<MachineEvent>,
    pub last_event_time: Option<Timestamp>,
    pub last_error_event: Option<MachineEvent>,
    pub crash_loop: bool,
    pub failed_machine_reclaim: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineNetwork {
    pub networkid: String,
    pub prefixes: Vec<String>,
    pub ips: Vec<String>,
    pub destinationprefixes: Vec<String>,
    pub networktype: String,
    pub vrf: u32,
    pub asn: u64,
    pub nat: bool,
    pub private: bool,
    pub underlay: bool,
    pub projectid: String,
}

/// `MachineNetwork.networktype` values.
pub mod machine_network_type {
    pub const PRIVATE_PRIMARY_UNSHARED: &str = "privateprimaryunshared";
    pub const PRIVATE_PRIMARY_SHARED: &str = "privateprimaryshared";
    pub const PRIVATE_SECONDARY_SHARED: &str = "privatesecondaryshared";
    pub const EXTERNAL: &str = "external";
    pub const UNDERLAY: &str = "underlay";
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct FirewallEgressRule {
    #[serde(default)]
    pub protocol: String,
    #[serde(default)]
    pub ports: Vec<i32>,
    #[serde(default)]
    pub to: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct FirewallIngressRule {
    #[serde(default)]
    pub protocol: String,
    #[serde(default)]
    pub ports: Vec<i32>,
    #[serde(default)]
    pub from: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct FirewallRules {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<FirewallEgressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<FirewallIngressRule>,
}

pub const ROLE_MACHINE: &str = "machine";
pub const ROLE_FIREWALL: &str = "firewall";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct MachineAllocation {
    pub allocationuuid: String,
    pub creator: String,
    pub created: Timestamp,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub hostname: String,
    pub project: String,
    pub image: Option<Image>,
    pub networks: Vec<MachineNetwork>,
    pub ssh_pub_keys: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_data: String,
    /// Never set to true by metal-api; do not use it for readiness.
    pub succeeded: bool,
    pub reinstall: bool,
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firewall_rules: Option<FirewallRules>,
}

impl Default for MachineAllocation {
    fn default() -> Self {
        MachineAllocation {
            allocationuuid: String::new(),
            creator: String::new(),
            created: epoch(),
            name: String::new(),
            description: String::new(),
            hostname: String::new(),
            project: String::new(),
            image: None,
            networks: Vec::new(),
            ssh_pub_keys: Vec::new(),
            user_data: String::new(),
            succeeded: false,
            reinstall: false,
            role: ROLE_MACHINE.into(),
            firewall_rules: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Machine {
    pub id: String,
    pub name: String,
    pub description: String,
    pub partition: Option<Partition>,
    pub rackid: String,
    pub size: Option<Size>,
    pub hardware: MachineHardware,
    pub allocation: Option<MachineAllocation>,
    pub state: MachineState,
    pub liveliness: String,
    pub events: MachineEvents,
    pub tags: Vec<String>,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            partition: None,
            rackid: String::new(),
            size: None,
            hardware: MachineHardware::default(),
            allocation: None,
            state: MachineState::default(),
            liveliness: String::new(),
            events: MachineEvents::default(),
            tags: Vec::new(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

impl Machine {
    /// The newest lifecycle event, if any.
    pub fn last_event(&self) -> Option<&str> {
        self.events.log.first().map(|e| e.event.as_str())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AllocationNetwork {
    pub networkid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoacquire: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MachineAllocateRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default)]
    pub projectid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub partitionid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sizeid: String,
    #[serde(default)]
    pub imageid: String,
    /// `None` is sent as `null`, which metal-api refuses: it needs at least one network.
    #[serde(default)]
    pub networks: Option<Vec<AllocationNetwork>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(default)]
    pub ssh_pub_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_data: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement_tags: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct FirewallCreateRequest {
    #[serde(flatten)]
    pub machine: MachineAllocateRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_rules: Option<FirewallRules>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MachineFindRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizeid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rackid: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_ids: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct HealthResponse {
    pub status: String,
    pub message: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct VersionResponse {
    pub name: String,
    pub version: String,
}

/// `HTTPErrorResponse` of metal-lib.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpErrorResponse {
    pub statuscode: u16,
    pub message: String,
}
