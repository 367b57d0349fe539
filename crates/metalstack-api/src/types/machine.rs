//! `MachineService`'s messages: machines and firewalls allocated, found, freed and power-cycled.

use super::catalog::{Image, Partition, Size};
use super::{Labels, Meta};
use serde::{Deserialize, Serialize};

rpc!("MachineService", "Get", MachineServiceGetRequest => MachineServiceGetResponse);
rpc!("MachineService", "List", MachineServiceListRequest => MachineServiceListResponse);
rpc!("MachineService", "Create", MachineServiceCreateRequest => MachineServiceCreateResponse);
rpc!("MachineService", "Delete", MachineServiceDeleteRequest => MachineServiceDeleteResponse);
rpc!("MachineService", "BMCCommand", MachineServiceBMCCommandRequest => MachineServiceBMCCommandResponse);

/// `metalstack.api.v2.Machine`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    pub uuid: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub partition: Option<Partition>,
    #[serde(default)]
    pub rack: String,
    #[serde(default)]
    pub size: Option<Size>,
    #[serde(default)]
    pub allocation: Option<MachineAllocation>,
    #[serde(default)]
    pub status: Option<MachineStatus>,
    #[serde(default)]
    pub recent_provisioning_events: Option<MachineRecentProvisioningEvents>,
}

/// `metalstack.api.v2.MachineAllocation`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineAllocation {
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub project: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub image: Option<Image>,
    #[serde(default)]
    pub networks: Vec<MachineNetwork>,
    #[serde(default)]
    pub allocation_type: MachineAllocationType,
    #[serde(default)]
    pub firewall_rules: Option<FirewallRules>,
}

/// `metalstack.api.v2.MachineNetwork`: a network the machine is in, and its addresses there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineNetwork {
    #[serde(default)]
    pub network: String,
    #[serde(default)]
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub destination_prefixes: Vec<String>,
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub network_type: super::network::NetworkType,
    #[serde(default)]
    pub nat_type: super::network::NATType,
    #[serde(default)]
    pub asn: u32,
    #[serde(default)]
    pub project: Option<String>,
}

/// `metalstack.api.v2.MachineStatus`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineStatus {
    #[serde(default)]
    pub liveliness: MachineLiveliness,
}

/// `metalstack.api.v2.MachineLiveliness`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MachineLiveliness {
    #[serde(rename = "MACHINE_LIVELINESS_ALIVE")]
    Alive,
    #[serde(rename = "MACHINE_LIVELINESS_DEAD")]
    Dead,
    #[serde(rename = "MACHINE_LIVELINESS_UNKNOWN")]
    Unknown,
    #[default]
    #[serde(rename = "MACHINE_LIVELINESS_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.MachineRecentProvisioningEvents`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineRecentProvisioningEvents {
    #[serde(default)]
    pub events: Vec<MachineProvisioningEvent>,
    #[serde(default)]
    pub last_event_time: Option<jiff::Timestamp>,
    #[serde(default)]
    pub last_error_event: Option<MachineProvisioningEvent>,
    #[serde(default)]
    pub state: MachineProvisioningEventState,
}

impl MachineRecentProvisioningEvents {
    /// Has the machine phoned home since its allocation: ready, in API v2's terms.
    pub fn phoned_home(&self) -> bool {
        self.events
            .iter()
            .any(|e| e.event == MachineProvisioningEventType::PhonedHome)
    }
}

/// `metalstack.api.v2.MachineProvisioningEvent`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineProvisioningEvent {
    #[serde(default)]
    pub time: Option<jiff::Timestamp>,
    #[serde(default)]
    pub event: MachineProvisioningEventType,
    #[serde(default)]
    pub message: String,
}

/// `metalstack.api.v2.MachineProvisioningEventType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MachineProvisioningEventType {
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_ALIVE")]
    Alive,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_CRASHED")]
    Crashed,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_PXE_BOOTING")]
    PxeBooting,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_PLANNED_REBOOT")]
    PlannedReboot,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_PREPARING")]
    Preparing,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_REGISTERING")]
    Registering,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_WAITING")]
    Waiting,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_INSTALLING")]
    Installing,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_BOOTING_NEW_KERNEL")]
    BootingNewKernel,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_PHONED_HOME")]
    PhonedHome,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_MACHINE_RECLAIM")]
    MachineReclaim,
    /// A step this client does not know.
    #[default]
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_TYPE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.MachineProvisioningEventState`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MachineProvisioningEventState {
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_STATE_CRASHLOOP")]
    Crashloop,
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_STATE_FAILED_RECLAIM")]
    FailedReclaim,
    #[default]
    #[serde(rename = "MACHINE_PROVISIONING_EVENT_STATE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.MachineAllocationType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MachineAllocationType {
    #[serde(rename = "MACHINE_ALLOCATION_TYPE_MACHINE")]
    Machine,
    #[serde(rename = "MACHINE_ALLOCATION_TYPE_FIREWALL")]
    Firewall,
    #[default]
    #[serde(rename = "MACHINE_ALLOCATION_TYPE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.MachineBMCCommand`: the commands capms sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MachineBMCCommand {
    #[serde(rename = "MACHINE_BMC_COMMAND_ON")]
    On,
    #[serde(rename = "MACHINE_BMC_COMMAND_OFF")]
    Off,
    #[serde(rename = "MACHINE_BMC_COMMAND_RESET")]
    Reset,
    #[serde(rename = "MACHINE_BMC_COMMAND_CYCLE")]
    Cycle,
}

/// `metalstack.api.v2.MachineQuery`: what capms asks by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineQuery {
    /// The machine's labels: the tags a v1 allocation wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<MachineAllocationQuery>,
}

/// `metalstack.api.v2.MachineAllocationQuery`: what capms asks by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineAllocationQuery {
    /// The allocation's labels: those a v2 `Create` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
}

/// `metalstack.api.v2.MachineServiceGetRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceGetRequest {
    pub uuid: String,
    pub project: String,
}

/// `metalstack.api.v2.MachineServiceGetResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceGetResponse {
    pub machine: Machine,
}

/// `metalstack.api.v2.MachineServiceListRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceListRequest {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<MachineQuery>,
}

/// `metalstack.api.v2.MachineServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceListResponse {
    #[serde(default)]
    pub machines: Vec<Machine>,
}

/// `metalstack.api.v2.MachineServiceCreateRequest`: what capms sends. A project token cannot
/// pin a machine (`uuid` needs an admin role), so capms names partition and size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineServiceCreateRequest {
    pub project: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub partition: String,
    pub size: String,
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_public_keys: Vec<String>,
    /// Base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userdata: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    pub networks: Vec<MachineAllocationNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_labels: Option<Labels>,
    pub allocation_type: MachineAllocationType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_spec: Option<FirewallSpec>,
}

/// `metalstack.api.v2.MachineAllocationNetwork`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineAllocationNetwork {
    pub network: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
}

/// `metalstack.api.v2.FirewallSpec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FirewallSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_rules: Option<FirewallRules>,
}

/// `metalstack.api.v2.FirewallRules`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirewallRules {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<FirewallEgressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<FirewallIngressRule>,
}

/// `metalstack.api.v2.FirewallEgressRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirewallEgressRule {
    pub protocol: IPProtocol,
    #[serde(default)]
    pub ports: Vec<u32>,
    #[serde(default)]
    pub to: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
}

/// `metalstack.api.v2.FirewallIngressRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirewallIngressRule {
    pub protocol: IPProtocol,
    #[serde(default)]
    pub ports: Vec<u32>,
    #[serde(default)]
    pub to: Vec<String>,
    #[serde(default)]
    pub from: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
}

/// `metalstack.api.v2.IPProtocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum IPProtocol {
    #[serde(rename = "IP_PROTOCOL_TCP")]
    Tcp,
    #[serde(rename = "IP_PROTOCOL_UDP")]
    Udp,
    /// Read as TCP by metal-apiserver.
    #[default]
    #[serde(rename = "IP_PROTOCOL_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.MachineServiceCreateResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceCreateResponse {
    pub machine: Machine,
}

/// `metalstack.api.v2.MachineServiceDeleteRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceDeleteRequest {
    pub uuid: String,
    pub project: String,
}

/// `metalstack.api.v2.MachineServiceDeleteResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceDeleteResponse {
    pub machine: Machine,
}

/// `metalstack.api.v2.MachineServiceBMCCommandRequest`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceBMCCommandRequest {
    pub uuid: String,
    pub project: String,
    pub command: MachineBMCCommand,
}

/// `metalstack.api.v2.MachineServiceBMCCommandResponse`: empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineServiceBMCCommandResponse {}
