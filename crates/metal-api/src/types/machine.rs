//! Machines, firewalls, their allocation and lifecycle.

use super::*;

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
    /// The switch ports this NIC is cabled to.
    pub neighbors: Vec<MachineNic>,
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
    #[serde(skip_serializing_if = "String::is_empty")]
    pub issuer: String,
    pub metal_hammer_version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineBios {
    pub version: String,
    pub vendor: String,
    pub date: String,
}

/// The chassis identify LED: `LED-ON`, `LED-OFF` or empty when unknown.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct LedState {
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
    /// metal-api writes it itself on a power reset, cycle or off.
    pub const PLANNED_REBOOT: &str = "Planned Reboot";
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
    #[serde(skip_serializing_if = "Option::is_none")]
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
    /// The network's own type (`child`, `external`, `underlay`, …).
    pub networktypev2: String,
    pub nattypev2: String,
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
    pub bios: MachineBios,
    pub ledstate: LedState,
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
            bios: MachineBios::default(),
            ledstate: LedState::default(),
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

    /// How far the machine is, read from its event log and liveliness.
    pub fn health(&self) -> MachineHealth {
        if self.events.crash_loop {
            return MachineHealth::CrashLoop;
        }
        if self.events.failed_machine_reclaim {
            return MachineHealth::FailedReclaim;
        }
        match self.last_event() {
            Some(event::PHONED_HOME) if self.liveliness == liveliness::ALIVE => {
                MachineHealth::Ready
            }
            Some(event::PHONED_HOME) => MachineHealth::NotAlive(self.liveliness.clone()),
            other => MachineHealth::Provisioning(other.unwrap_or("none").to_owned()),
        }
    }
}

/// How far a machine is: provisioning (with its last event), phoned home and alive, or failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineHealth {
    Ready,
    Provisioning(String),
    /// It PXE-boots again instead of phoning home.
    CrashLoop,
    /// It phoned home after it was freed: its reclaim failed.
    FailedReclaim,
    /// It phoned home, but its liveliness is not Alive.
    NotAlive(String),
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct AllocationNetwork {
    pub networkid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoacquire: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
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
#[serde(default)]
pub struct FirewallCreateRequest {
    #[serde(flatten)]
    pub machine: MachineAllocateRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_rules: Option<FirewallRules>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
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

/// One kind of machine issue metal-api knows (`GET /v1/machine/issues`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineIssue {
    pub id: String,
    /// `minor`, `major` or `critical`.
    pub severity: String,
    pub description: String,
    pub ref_url: String,
    pub details: String,
}

/// `POST /v1/machine/issues/evaluate`: which machines (a machine find) and which issues.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineIssuesRequest {
    #[serde(flatten)]
    pub find: MachineFindRequest,
    /// Issue ids to evaluate only (all when empty).
    pub only: Vec<String>,
    /// Issue ids to leave out.
    pub omit: Vec<String>,
    /// Lowest severity reported (`minor` when empty).
    pub severity: String,
    /// Seconds an error event counts as recent (metal-api's default when 0: one week).
    pub last_error_threshold: i64,
}

/// The issues of one machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineIssueResponse {
    pub machineid: String,
    pub issues: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(last: &str, liveliness: &str) -> Machine {
        let mut m = Machine {
            liveliness: liveliness.into(),
            ..Default::default()
        };
        m.events.log.push(MachineEvent {
            event: last.into(),
            ..Default::default()
        });
        m
    }

    #[test]
    fn health_follows_events_and_liveliness() {
        assert_eq!(
            machine(event::PHONED_HOME, "Alive").health(),
            MachineHealth::Ready
        );
        assert_eq!(
            machine(event::PHONED_HOME, "Unknown").health(),
            MachineHealth::NotAlive("Unknown".into())
        );
        assert_eq!(
            machine(event::INSTALLING, "Alive").health(),
            MachineHealth::Provisioning("Installing".into())
        );
        assert_eq!(
            Machine::default().health(),
            MachineHealth::Provisioning("none".into())
        );
        let mut looping = machine(event::PHONED_HOME, "Alive");
        looping.events.crash_loop = true;
        assert_eq!(looping.health(), MachineHealth::CrashLoop);
        let mut reclaim = machine(event::PHONED_HOME, "Alive");
        reclaim.events.failed_machine_reclaim = true;
        assert_eq!(reclaim.health(), MachineHealth::FailedReclaim);
    }
}
