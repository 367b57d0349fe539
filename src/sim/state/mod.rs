//! The simulator's in-memory metal-api: every rule of an allocation, free and find, as plain
//! functions over state. The HTTP layer (`http.rs`) only translates; the lifecycle driver
//! (`lifecycle.rs`) feeds events in on timers.

use super::inventory::Inventory;
use super::ipam::{Ipam, IpamError};
use crate::metal::cidr::{Cidr, Family};
use crate::metal::images;
use crate::metal::types::*;
use jiff::Timestamp;
use rand::Rng;
use rand::seq::IndexedRandom;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// An error as metal-api reports it: HTTP status plus message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError {
    pub status: u16,
    pub message: String,
}

impl SimError {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        SimError {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, message)
    }
    pub fn not_found(entity: &str, id: &str) -> Self {
        Self::new(404, format!("NotFound no {entity} with id \"{id}\" found"))
    }
}

pub type SimResult<T> = Result<T, SimError>;

/// Server-side tag: the private network's ASN.
pub const TAG_PRIMARY_ASN: &str = "machine.metal-stack.io/network.primary.asn";
/// Server-side tag: the machine's rack.
pub const TAG_RACK: &str = "machine.metal-stack.io/rack";
/// Server-side tag: the chassis serial.
pub const TAG_CHASSIS: &str = "machine.metal-stack.io/chassis";
/// Events kept per machine (responses show the newest 20).
const EVENTS_KEPT: usize = 100;
const EVENTS_SHOWN: usize = 20;

#[derive(Debug, Clone)]
pub struct MachineRecord {
    pub id: String,
    pub partition: String,
    pub size: String,
    pub rack: String,
    pub chassis: String,
    pub hardware: MachineHardware,
    pub allocation: Option<MachineAllocation>,
    pub state: MachineState,
    pub tags: Vec<String>,
    /// metal-hammer sits in its wait loop; only waiting machines are candidates.
    pub waiting: bool,
    /// Newest first.
    pub events: Vec<MachineEvent>,
    pub last_event_time: Option<Timestamp>,
    pub last_error_event: Option<MachineEvent>,
    pub crash_loop: bool,
    pub failed_machine_reclaim: bool,
    pub created: Timestamp,
    pub changed: Timestamp,
}

/// Switchable misbehaviour, for reliability tests. Not part of metal-api.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Added to every metal-api request.
    pub latency_ms: u64,
    /// Fraction (0..1) of metal-api requests answered with 503.
    pub error_rate: f64,
    /// Fraction (0..1) of new connections closed before a request is read.
    pub drop_rate: f64,
    /// Machines that stop after `Booting New Kernel`.
    pub never_phone_home: BTreeSet<String>,
    /// Machines that PXE-boot again instead of phoning home.
    pub crash_loop: BTreeSet<String>,
    /// Machines whose heartbeats stopped.
    pub dead: BTreeSet<String>,
}

#[derive(Debug)]
pub struct State {
    pub tenant: String,
    pub partitions: BTreeMap<String, Partition>,
    pub sizes: BTreeMap<String, Size>,
    pub images: BTreeMap<String, Image>,
    pub projects: BTreeMap<String, Project>,
    pub networks: BTreeMap<String, Network>,
    pub ips: BTreeMap<String, Ip>,
    pub machines: BTreeMap<String, MachineRecord>,
    pub ipam: Ipam,
    vrfs: BTreeSet<u32>,
    asns: BTreeSet<u64>,
    pub faults: Faults,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn cidr(text: &str) -> SimResult<Cidr> {
    text.parse().map_err(SimError::bad_request)
}

fn ipam_error(e: IpamError) -> SimError {
    match e {
        IpamError::AlreadyAllocated => SimError::new(409, "Conflict ip already allocated"),
        IpamError::NoIpsLeft(_) => {
            SimError::new(500, "Internal cannot allocate free ip in ipam, no ips left")
        }
        other => SimError::unprocessable(other.to_string()),
    }
}

/// Key of a `key=value` tag (the whole tag when it has no `=`).
fn tag_key(tag: &str) -> &str {
    tag.split_once('=').map_or(tag, |(k, _)| k)
}

/// Tags de-duplicated by key (the last one wins), then `system` tags overriding user tags with the
/// same key. Order is not preserved, as in metal-api.
fn merge_tags(user: &[String], system: &[String]) -> Vec<String> {
    let mut by_key: BTreeMap<String, String> = BTreeMap::new();
    for tag in user.iter().chain(system) {
        by_key.insert(tag_key(tag).to_owned(), tag.clone());
    }
    by_key.into_values().collect()
}

mod allocate;
mod ips;
mod issues;
mod lifecycle;
mod machines;
mod masterdata;
mod networks;
mod rules;
#[cfg(test)]
mod tests;

pub use lifecycle::BOOT_TO_WAITING;
use lifecycle::{METAL_HAMMER_VERSION, simulated_bios, simulated_hardware};
use rules::normalise_rules;
pub use rules::validate_firewall_rules;

impl State {
    pub fn from_inventory(inv: &Inventory) -> Result<State, String> {
        let now = Timestamp::now();
        let mut state = State {
            tenant: inv.tenant.clone(),
            partitions: BTreeMap::new(),
            sizes: BTreeMap::new(),
            images: BTreeMap::new(),
            projects: BTreeMap::new(),
            networks: BTreeMap::new(),
            ips: BTreeMap::new(),
            machines: BTreeMap::new(),
            ipam: Ipam::default(),
            vrfs: BTreeSet::new(),
            asns: BTreeSet::new(),
            faults: Faults::default(),
        };
        for p in &inv.partitions {
            let name = if p.name.is_empty() {
                p.id.clone()
            } else {
                p.name.clone()
            };
            let partition = Partition {
                id: p.id.clone(),
                name,
                description: p.description.clone(),
                created: now,
                changed: now,
                ..Default::default()
            };
            state.partitions.insert(p.id.clone(), partition);
        }
        for s in &inv.sizes {
            let size = Size {
                id: s.id.clone(),
                name: s.name.clone(),
                description: s.description.clone(),
                constraints: s.constraints.clone(),
                created: now,
                changed: now,
                ..Default::default()
            };
            state.sizes.insert(s.id.clone(), size);
        }
        for i in &inv.images {
            if images::os_and_version(&i.id).is_none() {
                return Err(format!("image {} is not <os>-<version>", i.id));
            }
            let image = Image {
                id: i.id.clone(),
                name: i.name.clone(),
                features: i.features.clone(),
                expiration_date: now + jiff::SignedDuration::from_hours(24 * 365),
                created: now,
                changed: now,
                ..Default::default()
            };
            state.images.insert(i.id.clone(), image);
        }
        for p in &inv.projects {
            let project = Project {
                meta: ProjectMeta {
                    id: p.id.clone(),
                    kind: "Project".into(),
                    apiversion: "v1".into(),
                },
                name: p.name.clone(),
                tenant_id: inv.tenant.clone(),
                ..Default::default()
            };
            state.projects.insert(p.id.clone(), project);
        }
        for n in &inv.networks {
            for p in &n.prefixes {
                let prefix: Cidr = p.parse().map_err(|e| format!("network {}: {e}", n.id))?;
                state
                    .ipam
                    .create_prefix(prefix)
                    .map_err(|e| format!("network {}: {e}", n.id))?;
            }
            if let Some(vrf) = n.vrf {
                state.vrfs.insert(vrf);
            }
            let networktype = if n.privatesuper {
                network_type::SUPER
            } else if n.underlay {
                network_type::UNDERLAY
            } else {
                network_type::EXTERNAL
            };
            let network = Network {
                id: n.id.clone(),
                name: if n.name.is_empty() {
                    n.id.clone()
                } else {
                    n.name.clone()
                },
                description: n.description.clone(),
                partitionid: n.partitionid.clone(),
                labels: n.labels.clone(),
                prefixes: n.prefixes.clone(),
                destinationprefixes: n.destinationprefixes.clone(),
                defaultchildprefixlength: n.defaultchildprefixlength.clone(),
                nat: n.nat,
                privatesuper: n.privatesuper,
                underlay: n.underlay,
                vrf: n.vrf,
                networktype: networktype.into(),
                nattype: if n.nat {
                    "ipv4-masq".into()
                } else {
                    "none".into()
                },
                created: now,
                changed: now,
                ..Default::default()
            };
            state.networks.insert(n.id.clone(), network);
        }
        for ip in &inv.ips {
            let req = IpAllocateRequest {
                networkid: ip.networkid.clone(),
                projectid: ip.projectid.clone(),
                type_: ip.type_.clone(),
                name: ip.name.clone(),
                ..Default::default()
            };
            state
                .ip_allocate(&req, Some(&ip.ipaddress))
                .map_err(|e| format!("ip {}: {}", ip.ipaddress, e.message))?;
        }
        for (n, m) in inv.machines.iter().enumerate() {
            if !state.partitions.contains_key(&m.partition) || !state.sizes.contains_key(&m.size) {
                return Err(format!("machine {}: unknown partition or size", m.id));
            }
            let record = MachineRecord {
                id: m.id.clone(),
                partition: m.partition.clone(),
                size: m.size.clone(),
                rack: m.rack.clone(),
                chassis: format!("SIM-CHASSIS-{:04}", n + 1),
                hardware: simulated_hardware(n),
                allocation: None,
                state: MachineState::default(),
                tags: Vec::new(),
                waiting: false,
                events: Vec::new(),
                last_event_time: None,
                last_error_event: None,
                crash_loop: false,
                failed_machine_reclaim: false,
                created: now,
                changed: now,
            };
            state.machines.insert(m.id.clone(), record);
            for (event, message) in BOOT_TO_WAITING {
                state.push_event(&m.id, event, message);
            }
            state.set_waiting(&m.id);
        }
        Ok(state)
    }
}
