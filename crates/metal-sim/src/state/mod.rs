//! The simulator's in-memory metal-api: every rule of an allocation, free and find, as plain
//! functions over state. The HTTP layer (`http.rs`) only translates; the lifecycle driver
//! (`lifecycle.rs`) feeds events in on timers.

pub use faults::Faults;
pub use power::Power;
pub(crate) use power::{Boot, Lease};

use super::inventory::Inventory;
use super::ipam::{Ipam, IpamError};
use ipnet::IpNet;
use jiff::Timestamp;
use metal_api::images;
use metal_api::types::*;
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
    /// The labels an API v2 `MachineService/Create` gave the allocation (kept apart from the
    /// machine's tags, as metal-apiserver keeps them; v1 does not see them).
    pub allocation_labels: BTreeMap<String, String>,
    /// metal-hammer sits in its wait loop; only waiting machines are candidates.
    pub waiting: bool,
    /// Newest first.
    pub events: Vec<MachineEvent>,
    pub last_event_time: Option<Timestamp>,
    pub last_error_event: Option<MachineEvent>,
    pub crash_loop: bool,
    pub failed_machine_reclaim: bool,
    /// The allocation (uuid) in which the machine last phoned home: it keeps its Node while it
    /// reboots.
    pub phoned_home_in: Option<String>,
    /// `host:port` of the machine's BMC.
    pub bmc: String,
    pub power: Power,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl MachineRecord {
    /// The cluster its allocation belongs to (`cluster.metal-stack.io/id`): a tag when allocated
    /// through v1, a label of the allocation through v2.
    pub fn cluster_id(&self) -> Option<&str> {
        let key = metal_api::tags::CLUSTER_ID;
        let tagged = self
            .tags
            .iter()
            .find_map(|t| t.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')));
        tagged.or_else(|| self.allocation_labels.get(key).map(String::as_str))
    }
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
    /// Per size, the versions of each image OS its machines take.
    pub size_image_constraints: BTreeMap<String, metal_api::size_images::SizeImageConstraint>,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A prefix as the simulator keeps it: its network address and length.
fn cidr(text: &str) -> SimResult<IpNet> {
    text.parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|e| SimError::bad_request(format!("{text:?} is not a CIDR: {e}")))
}

/// metal-api's name of a prefix's address family.
fn family(net: &IpNet) -> &'static str {
    match net {
        IpNet::V4(_) => "IPv4",
        IpNet::V6(_) => "IPv6",
    }
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

/// A network's `nattype`: `ipv4-masq` when it masquerades, else `none`.
fn nat_type(nat: bool) -> String {
    if nat { "ipv4-masq" } else { "none" }.into()
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
mod faults;
mod ips;
mod issues;
mod lifecycle;
mod load;
mod machines;
mod masterdata;
mod network_rules;
mod networks;
mod power;
mod rules;
mod size_images;
#[cfg(test)]
mod tests;

pub use lifecycle::BOOT_TO_WAITING;
use lifecycle::{METAL_HAMMER_VERSION, simulated_bios, simulated_hardware};
use rules::normalise_rules;
pub use rules::validate_firewall_rules;
