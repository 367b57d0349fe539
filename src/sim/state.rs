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

    // ---- masterdata, partitions, sizes, images ------------------------------------------

    pub fn project(&self, id: &str) -> SimResult<&Project> {
        self.projects.get(id).ok_or_else(|| {
            SimError::new(
                404,
                format!("rpc error: code = NotFound desc = project with id:{id} not found"),
            )
        })
    }

    pub fn partition(&self, id: &str) -> SimResult<&Partition> {
        self.partitions
            .get(id)
            .ok_or_else(|| SimError::not_found("partition", id))
    }

    pub fn size(&self, id: &str) -> SimResult<&Size> {
        self.sizes
            .get(id)
            .ok_or_else(|| SimError::not_found("size", id))
    }

    pub fn image(&self, id: &str) -> SimResult<&Image> {
        self.images
            .get(id)
            .ok_or_else(|| SimError::not_found("image", id))
    }

    /// Resolution as allocation and `/latest` do it.
    pub fn image_latest(&self, requested: &str) -> SimResult<&Image> {
        let id = images::resolve(requested, self.images.keys().map(String::as_str))
            .map_err(|e| SimError::not_found("image", &e.to_string()))?;
        self.image(id)
    }

    // ---- networks -------------------------------------------------------------------------

    pub fn network(&self, id: &str) -> SimResult<Network> {
        self.networks
            .get(id)
            .map(|n| self.network_view(n))
            .ok_or_else(|| SimError::not_found("network", id))
    }

    fn network_view(&self, n: &Network) -> Network {
        let mut view = n.clone();
        let mut v4 = Consumption::default();
        let mut v6 = Consumption::default();
        for p in n.prefixes.iter().filter_map(|p| p.parse::<Cidr>().ok()) {
            let c = if p.family == Family::V4 {
                &mut v4
            } else {
                &mut v6
            };
            c.available_ips += Ipam::available_count(&p);
            c.used_ips += self.ipam.used_count(&p);
            c.used_prefixes += self.ipam.child_count(&p);
        }
        let has = |f: Family| {
            n.prefixes
                .iter()
                .filter_map(|p| p.parse::<Cidr>().ok())
                .any(|p| p.family == f)
        };
        view.consumption = NetworkConsumption {
            ipv4: has(Family::V4).then_some(v4),
            ipv6: has(Family::V6).then_some(v6),
        };
        view
    }

    pub fn network_list(&self) -> Vec<Network> {
        self.networks
            .values()
            .map(|n| self.network_view(n))
            .collect()
    }

    pub fn network_find(&self, req: &NetworkFindRequest) -> Vec<Network> {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        self.networks
            .values()
            .filter(|n| {
                eq(&req.id, &n.id)
                    && eq(&req.name, &n.name)
                    && eq(&req.partitionid, &n.partitionid)
                    && eq(&req.projectid, &n.projectid)
                    && req
                        .parentnetworkid
                        .as_deref()
                        .is_none_or(|p| n.parentnetworkid.as_deref() == Some(p))
                    && req.privatesuper.is_none_or(|v| v == n.privatesuper)
                    && req.underlay.is_none_or(|v| v == n.underlay)
                    && req.nat.is_none_or(|v| v == n.nat)
                    && req.vrf.is_none_or(|v| n.vrf == Some(v))
                    && req
                        .labels
                        .as_ref()
                        .is_none_or(|want| want.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
            })
            .map(|n| self.network_view(n))
            .collect()
    }

    fn private_super(&self, partition: &str) -> SimResult<&Network> {
        self.networks
            .values()
            .find(|n| n.privatesuper && n.partitionid == partition)
            .ok_or_else(|| SimError::new(404, "NotFound no network found"))
    }

    /// Is this network private (a child of a private super network)?
    fn is_private(&self, n: &Network) -> bool {
        n.parentnetworkid
            .as_deref()
            .and_then(|p| self.networks.get(p))
            .is_some_and(|p| p.privatesuper)
    }

    pub fn network_allocate(&mut self, req: &NetworkAllocateRequest) -> SimResult<Network> {
        if req.projectid.is_empty() {
            return Err(SimError::bad_request("projectid should not be empty"));
        }
        if req.partitionid.is_empty() {
            return Err(SimError::bad_request("partitionid should not be empty"));
        }
        for d in &req.destinationprefixes {
            cidr(d)?;
        }
        self.project(&req.projectid)?;
        self.partition(&req.partitionid)?;
        let parent = self.private_super(&req.partitionid)?.clone();
        let lengths = parent.defaultchildprefixlength.clone().unwrap_or_default();
        let mut wanted = Vec::new();
        for p in &parent.prefixes {
            let p = cidr(p)?;
            if req
                .addressfamily
                .as_deref()
                .is_some_and(|f| f != p.family.api_name())
            {
                continue;
            }
            let len = lengths.get(p.family.api_name()).copied().ok_or_else(|| {
                SimError::bad_request(format!(
                    "super network {} has no default child prefix length for {}",
                    parent.id,
                    p.family.api_name()
                ))
            })?;
            wanted.push((p, len));
        }
        if wanted.is_empty() {
            return Err(SimError::bad_request(format!(
                "addressfamily {} is not available in super network {}",
                req.addressfamily.as_deref().unwrap_or_default(),
                parent.id
            )));
        }
        let mut acquired = Vec::new();
        for (p, len) in wanted {
            match self.ipam.acquire_child(p, len) {
                Ok(child) => acquired.push(child),
                Err(e) => {
                    for c in acquired {
                        let _ = self.ipam.release_prefix(c);
                    }
                    return Err(ipam_error(e));
                }
            }
        }
        let vrf = self.acquire_vrf();
        let now = Timestamp::now();
        let network = Network {
            id: uuid(),
            name: req.name.clone(),
            description: req.description.clone(),
            partitionid: req.partitionid.clone(),
            projectid: req.projectid.clone(),
            labels: req.labels.clone(),
            shared: req.shared,
            prefixes: acquired.iter().map(Cidr::to_string).collect(),
            destinationprefixes: req.destinationprefixes.clone(),
            nat: req.nat,
            vrf: Some(vrf),
            parentnetworkid: Some(parent.id.clone()),
            networktype: if req.shared {
                network_type::CHILD_SHARED
            } else {
                network_type::CHILD
            }
            .into(),
            nattype: if req.nat {
                "ipv4-masq".into()
            } else {
                "none".into()
            },
            created: now,
            changed: now,
            ..Default::default()
        };
        self.networks.insert(network.id.clone(), network.clone());
        Ok(self.network_view(&network))
    }

    fn acquire_vrf(&mut self) -> u32 {
        let mut rng = rand::rng();
        loop {
            let vrf = rng.random_range(1..=131_072);
            if self.vrfs.insert(vrf) {
                return vrf;
            }
        }
    }

    /// Releases the network's prefixes and VRF. Refused (422) while a prefix holds IPs, which is
    /// the case shortly after its machines were freed, until their IPs are released.
    pub fn network_free(&mut self, id: &str) -> SimResult<Network> {
        let network = self
            .networks
            .get(id)
            .cloned()
            .ok_or_else(|| SimError::not_found("network", id))?;
        if network.parentnetworkid.is_none() {
            // Unverified in metal-api: freeing a top-level network; refusing it is the safe choice.
            return Err(SimError::unprocessable(format!(
                "network {id} is not a child network and cannot be freed"
            )));
        }
        let prefixes: Vec<Cidr> = network
            .prefixes
            .iter()
            .map(|p| cidr(p))
            .collect::<SimResult<_>>()?;
        if let Some(busy) = prefixes.iter().find(|p| self.ipam.used_count(p) > 0) {
            return Err(ipam_error(IpamError::PrefixHasIps(busy.to_string())));
        }
        for p in prefixes {
            self.ipam.release_prefix(p).map_err(ipam_error)?;
        }
        if let Some(vrf) = network.vrf {
            self.vrfs.remove(&vrf);
        }
        self.networks.remove(id);
        let mut old = network;
        old.consumption = NetworkConsumption::default();
        Ok(old)
    }

    // ---- IPs ------------------------------------------------------------------------------

    pub fn ip(&self, address: &str) -> SimResult<&Ip> {
        self.ips
            .get(address)
            .ok_or_else(|| SimError::not_found("ip", address))
    }

    pub fn ip_find(&self, req: &IpFindRequest) -> Vec<Ip> {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let machine_tag = req
            .machineid
            .as_ref()
            .map(|m| format!("{MACHINE_ID_TAG}={m}"));
        self.ips
            .values()
            .filter(|ip| {
                eq(&req.ipaddress, &ip.ipaddress)
                    && eq(&req.allocationuuid, &ip.allocationuuid)
                    && eq(&req.name, &ip.name)
                    && eq(&req.networkid, &ip.networkid)
                    && eq(&req.projectid, &ip.projectid)
                    && eq(&req.type_, &ip.type_)
                    && machine_tag.as_ref().is_none_or(|t| ip.tags.contains(t))
                    && req.tags.iter().all(|t| ip.tags.contains(t))
            })
            .cloned()
            .collect()
    }

    /// The prefix of `network` that holds `address`.
    fn prefix_of(&self, network: &Network, address: IpAddr) -> Option<Cidr> {
        network
            .prefixes
            .iter()
            .filter_map(|p| p.parse::<Cidr>().ok())
            .find(|p| p.contains_addr(address))
    }

    pub fn ip_allocate(
        &mut self,
        req: &IpAllocateRequest,
        specific: Option<&str>,
    ) -> SimResult<Ip> {
        if req.networkid.is_empty() {
            return Err(SimError::bad_request("networkid should not be empty"));
        }
        if req.projectid.is_empty() {
            return Err(SimError::bad_request("projectid should not be empty"));
        }
        if specific.is_some() && req.addressfamily.is_some() {
            return Err(SimError::bad_request(
                "it is not possible to specify specificIP and addressfamily",
            ));
        }
        let network = self
            .networks
            .get(&req.networkid)
            .cloned()
            .ok_or_else(|| SimError::not_found("network", &req.networkid))?;
        self.project(&req.projectid)?;
        if network.prefixes.is_empty() {
            return Err(SimError::unprocessable(format!(
                "network {} has no prefixes",
                network.id
            )));
        }
        if self.is_private(&network) && !network.shared && network.projectid != req.projectid {
            return Err(SimError::unprocessable(format!(
                "can not allocate ip for project {} because network belongs to {} and the network is not shared",
                req.projectid, network.projectid
            )));
        }
        let address = match specific {
            Some(text) => {
                let address: IpAddr = text.parse().map_err(|_| {
                    SimError::unprocessable(format!("{text} is not a valid ip address"))
                })?;
                let prefix = self.prefix_of(&network, address).ok_or_else(|| {
                    SimError::unprocessable(
                        "specific ip not contained in any of the defined prefixes",
                    )
                })?;
                self.ipam
                    .acquire_specific(prefix, address)
                    .map_err(ipam_error)?;
                address
            }
            None => self.acquire_in_network(&network, req.addressfamily.as_deref())?,
        };
        let mut tags = req.tags.clone();
        if let Some(m) = &req.machineid {
            tags.push(format!("{MACHINE_ID_TAG}={m}"));
        }
        let tags: Vec<String> = tags
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let now = Timestamp::now();
        let ip = Ip {
            ipaddress: address.to_string(),
            allocationuuid: uuid(),
            name: req.name.clone(),
            description: req.description.clone(),
            networkid: network.id.clone(),
            projectid: req.projectid.clone(),
            type_: if req.type_ == IP_TYPE_STATIC {
                IP_TYPE_STATIC
            } else {
                IP_TYPE_EPHEMERAL
            }
            .into(),
            tags,
            created: now,
            changed: now,
        };
        self.ips.insert(ip.ipaddress.clone(), ip.clone());
        Ok(ip)
    }

    fn acquire_in_network(&mut self, network: &Network, family: Option<&str>) -> SimResult<IpAddr> {
        let prefixes: Vec<Cidr> = network
            .prefixes
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        let family = match family {
            Some(f) => f.to_owned(),
            None if prefixes.iter().any(|p| p.family == Family::V4) => "IPv4".to_owned(),
            None => "IPv6".to_owned(),
        };
        let candidates: Vec<Cidr> = prefixes
            .into_iter()
            .filter(|p| p.family.api_name() == family)
            .collect();
        if candidates.is_empty() {
            return Err(SimError::bad_request(format!(
                "network {} has no {family} prefix",
                network.id
            )));
        }
        for p in candidates {
            match self.ipam.acquire_ip(p) {
                Ok(a) => return Ok(a),
                Err(IpamError::NoIpsLeft(_)) => continue,
                Err(e) => return Err(ipam_error(e)),
            }
        }
        Err(ipam_error(IpamError::NoIpsLeft(network.id.clone())))
    }

    /// Frees an IP; refused with 400 while it has machine scope.
    pub fn ip_free(&mut self, address: &str) -> SimResult<Ip> {
        let ip = self.ip(address)?.clone();
        if ip.has_machine_scope() {
            return Err(SimError::bad_request(
                "ip with machine scope can not be deleted",
            ));
        }
        self.release_ip_record(&ip);
        Ok(ip)
    }

    fn release_ip_record(&mut self, ip: &Ip) {
        if let (Some(network), Ok(address)) = (
            self.networks.get(&ip.networkid),
            ip.ipaddress.parse::<IpAddr>(),
        ) && let Some(prefix) = self.prefix_of(network, address)
        {
            let _ = self.ipam.release_ip(prefix, address);
        }
        self.ips.remove(&ip.ipaddress);
    }

    // ---- machines -------------------------------------------------------------------------

    fn liveliness(&self, m: &MachineRecord) -> &'static str {
        if !self.faults.dead.contains(&m.id) {
            liveliness::ALIVE
        } else if m.allocation.is_some() {
            liveliness::UNKNOWN
        } else {
            liveliness::DEAD
        }
    }

    pub fn machine_view(&self, m: &MachineRecord) -> Machine {
        Machine {
            id: m.id.clone(),
            partition: self.partitions.get(&m.partition).cloned(),
            rackid: m.rack.clone(),
            size: self.sizes.get(&m.size).cloned(),
            hardware: m.hardware.clone(),
            allocation: m.allocation.clone(),
            state: m.state.clone(),
            liveliness: self.liveliness(m).into(),
            events: MachineEvents {
                log: m.events.iter().take(EVENTS_SHOWN).cloned().collect(),
                last_event_time: m.last_event_time,
                last_error_event: m.last_error_event.clone(),
                crash_loop: m.crash_loop,
                failed_machine_reclaim: m.failed_machine_reclaim,
            },
            tags: m.tags.clone(),
            created: m.created,
            changed: m.changed,
            ..Default::default()
        }
    }

    pub fn machine(&self, id: &str) -> SimResult<Machine> {
        self.machines
            .get(id)
            .map(|m| self.machine_view(m))
            .ok_or_else(|| SimError::not_found("machine", id))
    }

    /// A firewall: an allocated machine with role firewall.
    pub fn firewall(&self, id: &str) -> SimResult<Machine> {
        let m = self
            .machines
            .get(id)
            .ok_or_else(|| SimError::not_found("machine", id))?;
        if m.allocation
            .as_ref()
            .is_none_or(|a| a.role != ROLE_FIREWALL)
        {
            return Err(SimError::new(404, "machine is not a firewall"));
        }
        Ok(self.machine_view(m))
    }

    pub fn machine_find(&self, req: &MachineFindRequest) -> Vec<Machine> {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let wants_allocation = req.allocation_name.is_some()
            || req.allocation_project.is_some()
            || req.allocation_hostname.is_some()
            || req.allocation_role.is_some()
            || req.allocation_image_id.is_some();
        self.machines
            .values()
            .filter(|m| {
                let alloc_ok = match &m.allocation {
                    Some(a) => {
                        eq(&req.allocation_name, &a.name)
                            && eq(&req.allocation_project, &a.project)
                            && eq(&req.allocation_hostname, &a.hostname)
                            && eq(&req.allocation_role, &a.role)
                            && eq(
                                &req.allocation_image_id,
                                a.image.as_ref().map_or("", |i| i.id.as_str()),
                            )
                            && req
                                .network_ids
                                .iter()
                                .all(|n| a.networks.iter().any(|mn| &mn.networkid == n))
                    }
                    None => !wants_allocation && req.network_ids.is_empty(),
                };
                alloc_ok
                    && eq(&req.id, &m.id)
                    && req.name.as_deref().is_none_or(|n| n.is_empty())
                    && eq(&req.partition_id, &m.partition)
                    && eq(&req.sizeid, &m.size)
                    && eq(&req.rackid, &m.rack)
                    && req.tags.iter().all(|t| m.tags.contains(t))
            })
            .map(|m| self.machine_view(m))
            .collect()
    }

    /// Allocates a machine or firewall, checking in the order metal-api checks.
    pub fn machine_allocate(
        &mut self,
        req: &MachineAllocateRequest,
        rules: Option<&FirewallRules>,
        role: &str,
        creator: &str,
    ) -> SimResult<Machine> {
        // 1. Request shape (400).
        let requested = match &req.networks {
            None => return Err(SimError::bad_request("network ids cannot be nil")),
            Some(n) if n.is_empty() => {
                return Err(SimError::bad_request("network ids cannot be empty"));
            }
            Some(n) => n.clone(),
        };
        let image = self
            .image_latest(&req.imageid)
            .map_err(|e| SimError::bad_request(e.message))?
            .clone();
        let feature = if role == ROLE_FIREWALL {
            FEATURE_FIREWALL
        } else {
            FEATURE_MACHINE
        };
        if !image.has_feature(feature) {
            return Err(SimError::bad_request(format!(
                "given image is not usable for a {feature}, features: {}",
                image.features.join(", ")
            )));
        }
        let (partition, size) = match &req.uuid {
            Some(uuid) => {
                let m = self.machines.get(uuid).ok_or_else(|| {
                    SimError::bad_request(SimError::not_found("machine", uuid).message)
                })?;
                if !req.partitionid.is_empty() && req.partitionid != m.partition {
                    return Err(SimError::bad_request(format!(
                        "requested partition ({}) does not match with the partition of the machine ({})",
                        req.partitionid, m.partition
                    )));
                }
                if !req.sizeid.is_empty() && req.sizeid != m.size {
                    return Err(SimError::bad_request(format!(
                        "requested size ({}) does not match with the size of the machine ({})",
                        req.sizeid, m.size
                    )));
                }
                (m.partition.clone(), m.size.clone())
            }
            None => {
                if req.partitionid.is_empty() {
                    return Err(SimError::bad_request(
                        "partition id must be specified when no machine uuid is given",
                    ));
                }
                if req.sizeid.is_empty() {
                    return Err(SimError::bad_request(
                        "size id must be specified when no machine uuid is given",
                    ));
                }
                let p = self.partition(&req.partitionid).map_err(|e| {
                    SimError::bad_request(format!(
                        "partition:{} not found {}",
                        req.partitionid, e.message
                    ))
                })?;
                let s = self.size(&req.sizeid).map_err(|e| {
                    SimError::bad_request(format!("size:{} not found {}", req.sizeid, e.message))
                })?;
                (p.id.clone(), s.id.clone())
            }
        };
        if let Some(rules) = rules {
            validate_firewall_rules(rules)?;
        }
        // 2. Spec validation (422).
        if req.projectid.is_empty() {
            return Err(SimError::unprocessable("projectid must not be empty"));
        }
        for key in &req.ssh_pub_keys {
            if !looks_like_ssh_key(key) {
                return Err(SimError::unprocessable(format!(
                    "invalid public SSH key: {key}"
                )));
            }
        }
        // 4. Project.
        self.project(&req.projectid)?;
        // 7. Candidate.
        let machine_id = match &req.uuid {
            Some(uuid) => {
                if self
                    .machines
                    .get(uuid)
                    .is_some_and(|m| m.allocation.is_some())
                {
                    return Err(SimError::unprocessable(format!(
                        "machine \"{uuid}\" already allocated"
                    )));
                }
                uuid.clone()
            }
            None => {
                self.pick_candidate(&partition, &size, &req.projectid, role, &req.placement_tags)?
            }
        };
        // 9. Networks.
        let plan = self.gather_networks(&requested, &req.ips, &partition, &req.projectid, role)?;
        // 10. IPs and ASN; roll back on failure.
        let mut acquired: Vec<Ip> = Vec::new();
        let mut networks = Vec::new();
        let asn = self.acquire_asn();
        let machine_tag = format!("{MACHINE_ID_TAG}={machine_id}");
        for (network, networktype, auto) in &plan {
            let mut ips = Vec::new();
            if *auto {
                let families: BTreeSet<Family> = network
                    .prefixes
                    .iter()
                    .filter_map(|p| p.parse::<Cidr>().ok())
                    .map(|p| p.family)
                    .collect();
                for family in families {
                    let ip_req = IpAllocateRequest {
                        networkid: network.id.clone(),
                        projectid: req.projectid.clone(),
                        type_: IP_TYPE_EPHEMERAL.into(),
                        name: req.name.clone(),
                        description: "autoassigned".into(),
                        machineid: Some(machine_id.clone()),
                        addressfamily: Some(family.api_name().into()),
                        ..Default::default()
                    };
                    match self.ip_allocate_unchecked(&ip_req, network) {
                        Ok(ip) => {
                            ips.push(ip.ipaddress.clone());
                            acquired.push(ip);
                        }
                        Err(e) => {
                            for ip in &acquired {
                                self.release_ip_record(ip);
                            }
                            self.asns.remove(&asn);
                            return Err(e);
                        }
                    }
                }
            }
            for address in &req.ips {
                if let Ok(a) = address.parse::<IpAddr>()
                    && self.prefix_of(network, a).is_some()
                {
                    ips.push(address.clone());
                    if let Some(ip) = self.ips.get_mut(address)
                        && !ip.tags.contains(&machine_tag)
                    {
                        ip.tags.push(machine_tag.clone());
                    }
                }
            }
            let private = networktype.starts_with("private");
            networks.push(MachineNetwork {
                networkid: network.id.clone(),
                prefixes: network.prefixes.clone(),
                ips,
                destinationprefixes: network.destinationprefixes.clone(),
                networktype: (*networktype).into(),
                vrf: network.vrf.unwrap_or_default(),
                asn,
                nat: network.nat,
                private,
                underlay: network.underlay,
                projectid: if private {
                    network.projectid.clone()
                } else {
                    String::new()
                },
            });
        }
        // 11. Final write.
        let now = Timestamp::now();
        let allocation = MachineAllocation {
            allocationuuid: uuid(),
            creator: creator.into(),
            created: now,
            name: req.name.clone(),
            description: req.description.clone(),
            hostname: if req.hostname.is_empty() {
                "metal".into()
            } else {
                req.hostname.clone()
            },
            project: req.projectid.clone(),
            image: Some(image),
            networks,
            ssh_pub_keys: req.ssh_pub_keys.clone(),
            user_data: req.user_data.clone(),
            succeeded: false,
            reinstall: false,
            role: role.into(),
            firewall_rules: rules.map(normalise_rules),
        };
        let Some(m) = self.machines.get_mut(&machine_id) else {
            return Err(SimError::not_found("machine", &machine_id));
        };
        let mut system = vec![
            format!("{TAG_PRIMARY_ASN}={asn}"),
            format!("{TAG_CHASSIS}={}", m.chassis),
        ];
        if !m.rack.is_empty() {
            system.push(format!("{TAG_RACK}={}", m.rack));
        }
        m.tags = merge_tags(&req.tags, &system);
        m.allocation = Some(allocation);
        m.waiting = false;
        m.changed = now;
        let view = self.machine(&machine_id)?;
        Ok(view)
    }

    fn ip_allocate_unchecked(
        &mut self,
        req: &IpAllocateRequest,
        network: &Network,
    ) -> SimResult<Ip> {
        let address = self.acquire_in_network(network, req.addressfamily.as_deref())?;
        let now = Timestamp::now();
        let ip = Ip {
            ipaddress: address.to_string(),
            allocationuuid: uuid(),
            name: req.name.clone(),
            description: req.description.clone(),
            networkid: network.id.clone(),
            projectid: req.projectid.clone(),
            type_: req.type_.clone(),
            tags: req
                .machineid
                .iter()
                .map(|m| format!("{MACHINE_ID_TAG}={m}"))
                .collect(),
            created: now,
            changed: now,
        };
        self.ips.insert(ip.ipaddress.clone(), ip.clone());
        Ok(ip)
    }

    fn acquire_asn(&mut self) -> u64 {
        let mut rng = rand::rng();
        loop {
            let asn = 4_210_000_000 + rng.random_range(1..=131_072u64);
            if self.asns.insert(asn) {
                return asn;
            }
        }
    }

    fn pick_candidate(
        &self,
        partition: &str,
        size: &str,
        project: &str,
        role: &str,
        placement_tags: &[String],
    ) -> SimResult<String> {
        let free: Vec<&MachineRecord> = self
            .machines
            .values()
            .filter(|m| {
                m.allocation.is_none()
                    && m.partition == partition
                    && m.size == size
                    && m.state.value.is_empty()
                    && m.waiting
                    && self.liveliness(m) == liveliness::ALIVE
            })
            .collect();
        if free.is_empty() {
            return Err(SimError::unprocessable("no machine available"));
        }
        // Rack spreading: prefer racks with the fewest machines of this project and role, then
        // (if placement tags are given) the fewest of this project's machines carrying them.
        let in_rack = |rack: &str, with_tags: bool| {
            self.machines
                .values()
                .filter(|m| m.rack == rack)
                .filter(|m| {
                    m.allocation
                        .as_ref()
                        .is_some_and(|a| a.project == project && (with_tags || a.role == role))
                        && (!with_tags || placement_tags.iter().all(|t| m.tags.contains(t)))
                })
                .count()
        };
        let racks: BTreeSet<&str> = free.iter().map(|m| m.rack.as_str()).collect();
        let least = |with_tags: bool| -> BTreeSet<&str> {
            let min = racks
                .iter()
                .map(|r| in_rack(r, with_tags))
                .min()
                .unwrap_or(0);
            racks
                .iter()
                .copied()
                .filter(|r| in_rack(r, with_tags) == min)
                .collect()
        };
        let by_role = least(false);
        let chosen: BTreeSet<&str> = if placement_tags.is_empty() {
            by_role
        } else {
            let by_tags = least(true);
            let both: BTreeSet<&str> = by_role.intersection(&by_tags).copied().collect();
            if both.is_empty() { by_tags } else { both }
        };
        let candidates: Vec<&&MachineRecord> = free
            .iter()
            .filter(|m| chosen.contains(m.rack.as_str()))
            .collect();
        candidates
            .choose(&mut rand::rng())
            .map(|m| m.id.clone())
            .ok_or_else(|| SimError::unprocessable("no machine available"))
    }

    /// The network rules of an allocation: which networks, of which kind, with auto-acquire.
    fn gather_networks(
        &self,
        requested: &[AllocationNetwork],
        ips: &[String],
        partition: &str,
        project: &str,
        role: &str,
    ) -> SimResult<Vec<(Network, &'static str, bool)>> {
        let ids: BTreeSet<&str> = requested.iter().map(|n| n.networkid.as_str()).collect();
        if ids.len() != requested.len() {
            return Err(SimError::unprocessable("given network ids are not unique"));
        }
        let mut private_unshared = Vec::new();
        let mut private_shared = Vec::new();
        let mut external = Vec::new();
        for r in requested {
            let n = self
                .networks
                .get(&r.networkid)
                .ok_or_else(|| SimError::not_found("network", &r.networkid))?;
            if n.underlay {
                return Err(SimError::unprocessable(format!(
                    "underlay networks are not allowed to be set explicitly: {}",
                    n.id
                )));
            }
            if n.privatesuper {
                return Err(SimError::unprocessable(format!(
                    "private super networks are not allowed to be set explicitly: {}",
                    n.id
                )));
            }
            let supplied = ips
                .iter()
                .filter_map(|a| a.parse::<IpAddr>().ok())
                .any(|a| self.prefix_of(n, a).is_some());
            let auto = r.autoacquire.unwrap_or(true);
            if !auto && !supplied && self.is_private(n) {
                return Err(SimError::unprocessable(format!(
                    "the private network {} has no auto ip acquisition, but no suitable IPs were provided, which would lead into a machine having no ip address",
                    n.id
                )));
            }
            if self.is_private(n) {
                if n.partitionid != partition {
                    return Err(SimError::unprocessable(format!(
                        "private network \"{}\" must be located in the partition where the machine is going to be placed",
                        n.id
                    )));
                }
                if !n.shared && n.projectid != project {
                    return Err(SimError::unprocessable(
                        "the given private network does not belong to the project, which is not allowed",
                    ));
                }
                if n.shared {
                    private_shared.push((n.clone(), auto))
                } else {
                    private_unshared.push((n.clone(), auto))
                }
            } else {
                external.push((n.clone(), auto));
            }
        }
        if private_unshared.is_empty() && private_shared.is_empty() {
            return Err(SimError::unprocessable("no private network given"));
        }
        if role == ROLE_MACHINE && private_unshared.len() + private_shared.len() > 1 {
            return Err(SimError::unprocessable(
                "machines are not allowed to be placed into multiple private networks",
            ));
        }
        if private_unshared.len() > 1 || (private_unshared.is_empty() && private_shared.len() > 1) {
            return Err(SimError::unprocessable(
                "multiple private networks are specified but there must be only one primary private network that must not be shared",
            ));
        }
        let mut plan = Vec::new();
        if let Some((n, auto)) = private_unshared.pop() {
            plan.push((n, machine_network_type::PRIVATE_PRIMARY_UNSHARED, auto));
            for (n, auto) in private_shared {
                plan.push((n, machine_network_type::PRIVATE_SECONDARY_SHARED, auto));
            }
        } else if let Some((n, auto)) = private_shared.pop() {
            plan.push((n, machine_network_type::PRIVATE_PRIMARY_SHARED, auto));
        }
        for (n, auto) in external {
            plan.push((n, machine_network_type::EXTERNAL, auto));
        }
        if role == ROLE_FIREWALL {
            let underlays: Vec<&Network> = self
                .networks
                .values()
                .filter(|n| n.underlay && n.partitionid == partition)
                .collect();
            let [underlay] = underlays[..] else {
                return Err(SimError::unprocessable(format!(
                    "partition {partition} needs exactly one underlay network, it has {}",
                    underlays.len()
                )));
            };
            plan.push((underlay.clone(), machine_network_type::UNDERLAY, true));
        }
        Ok(plan)
    }

    /// Frees a machine: allocation and tags go at once; its IPs are released later by the
    /// lifecycle driver (`release_machine_ips`). Returns whether it was allocated.
    pub fn machine_free(&mut self, id: &str) -> SimResult<(Machine, bool)> {
        let m = self
            .machines
            .get_mut(id)
            .ok_or_else(|| SimError::not_found("machine", id))?;
        if m.state.value == "LOCKED" {
            return Err(SimError::unprocessable("machine is locked"));
        }
        let freed = m.allocation.take();
        if let Some(asn) = freed
            .as_ref()
            .and_then(|a| a.networks.first())
            .map(|n| n.asn)
        {
            self.asns.remove(&asn);
        }
        let was_allocated = freed.is_some();
        m.tags.clear();
        m.changed = Timestamp::now();
        let view = self.machine(id)?;
        Ok((view, was_allocated))
    }

    /// Removes the machine tag from every IP that carries it: ephemeral IPs are deleted and
    /// released, static ones stay (back in project scope).
    pub fn release_machine_ips(&mut self, id: &str) {
        let tag = format!("{MACHINE_ID_TAG}={id}");
        let owned: Vec<Ip> = self
            .ips
            .values()
            .filter(|ip| ip.tags.contains(&tag))
            .cloned()
            .collect();
        for ip in owned {
            let remaining: Vec<String> = ip.tags.iter().filter(|t| **t != tag).cloned().collect();
            let still_machine_scoped = remaining.iter().any(|t| t.starts_with(MACHINE_ID_TAG));
            if ip.type_ == IP_TYPE_STATIC || still_machine_scoped {
                if let Some(stored) = self.ips.get_mut(&ip.ipaddress) {
                    stored.tags = remaining;
                    stored.changed = Timestamp::now();
                }
            } else {
                self.release_ip_record(&ip);
            }
        }
    }

    // ---- lifecycle ------------------------------------------------------------------------

    /// Appends an event as metal-hammer would send it, applying the FSM's bookkeeping.
    pub fn push_event(&mut self, id: &str, event: &str, message: &str) {
        let Some(m) = self.machines.get_mut(id) else {
            return;
        };
        let now = Timestamp::now();
        let previous = m
            .events
            .first()
            .map(|e| e.event.clone())
            .unwrap_or_default();
        let unexpected_boot = (event == event::PXE_BOOTING || event == event::PREPARING)
            && m.allocation.is_some()
            && !previous.is_empty()
            && previous != event::MACHINE_RECLAIM
            && previous != event::PXE_BOOTING;
        let mut entry = MachineEvent {
            time: now,
            event: event.into(),
            message: message.into(),
        };
        if unexpected_boot {
            entry.message = format!(
                "[unexpectedly received in {}] {message}",
                previous.to_lowercase()
            );
            m.crash_loop = true;
            m.last_error_event = Some(entry.clone());
        }
        if event == event::PHONED_HOME {
            m.crash_loop = false;
            // A machine that phones home in its previous installation after a reclaim never got
            // reinstalled: the reclaim failed.
            if previous == event::MACHINE_RECLAIM {
                m.failed_machine_reclaim = true;
            }
            // Repeated Phoned Home events only refresh the heartbeat.
            if previous == event::PHONED_HOME {
                m.last_event_time = Some(now);
                return;
            }
        }
        if event == event::WAITING {
            m.failed_machine_reclaim = false;
        }
        m.events.insert(0, entry);
        m.events.truncate(EVENTS_KEPT);
        m.last_event_time = Some(now);
    }

    pub fn set_waiting(&mut self, id: &str) {
        if let Some(m) = self.machines.get_mut(id) {
            m.waiting = true;
        }
    }

    /// The allocation uuid of a machine, if allocated (lifecycle tasks check it has not changed).
    pub fn allocation_uuid(&self, id: &str) -> Option<String> {
        self.machines
            .get(id)
            .and_then(|m| m.allocation.as_ref())
            .map(|a| a.allocationuuid.clone())
    }
}

/// The events a machine goes through from power-on to the wait loop.
pub const BOOT_TO_WAITING: [(&str, &str); 4] = [
    (event::PXE_BOOTING, "machine sent extended dhcp request"),
    (
        event::PREPARING,
        "starting metal-hammer version:v0.13.0 (simulated)",
    ),
    (event::REGISTERING, "start registering"),
    (event::WAITING, "waiting for allocation"),
];

fn simulated_hardware(n: usize) -> MachineHardware {
    MachineHardware {
        memory: 2 * 1024 * 1024 * 1024,
        cpu_cores: 0,
        cpus: vec![MachineCpu {
            vendor: "GenuineIntel".into(),
            model: "QEMU Virtual CPU".into(),
            cores: 1,
            threads: 1,
        }],
        disks: vec![MachineDisk {
            name: "/dev/vda".into(),
            size: 5 * 1000 * 1000 * 1000,
        }],
        nics: (0..2)
            .map(|i| MachineNic {
                mac: format!(
                    "aa:c1:ab:{:02x}:{:02x}:{:02x}",
                    (n >> 8) & 0xff,
                    n & 0xff,
                    i
                ),
                name: format!("lan{i}"),
                identifier: format!("sim-{n}-{i}"),
            })
            .collect(),
    }
}

/// A public key line as authorized_keys holds it: type, base64 blob, optional comment.
fn looks_like_ssh_key(key: &str) -> bool {
    let mut parts = key.split_whitespace();
    let (Some(kind), Some(blob)) = (parts.next(), parts.next()) else {
        return false;
    };
    let known =
        kind.starts_with("ssh-") || kind.starts_with("ecdsa-sha2-") || kind.starts_with("sk-");
    known
        && blob.len() >= 16
        && blob
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

fn normalise_rules(rules: &FirewallRules) -> FirewallRules {
    let proto = |p: &str| {
        if p.is_empty() {
            "tcp".to_owned()
        } else {
            p.to_lowercase()
        }
    };
    FirewallRules {
        egress: rules
            .egress
            .iter()
            .map(|r| FirewallEgressRule {
                protocol: proto(&r.protocol),
                ..r.clone()
            })
            .collect(),
        ingress: rules
            .ingress
            .iter()
            .map(|r| FirewallIngressRule {
                protocol: proto(&r.protocol),
                ..r.clone()
            })
            .collect(),
    }
}

/// metal-api's firewall rule validation (400 on failure).
pub fn validate_firewall_rules(rules: &FirewallRules) -> SimResult<()> {
    let check = |protocol: &str,
                 ports: &[i32],
                 cidrs: Vec<&String>,
                 comment: &str|
     -> SimResult<()> {
        if !protocol.is_empty() && !["tcp", "udp"].contains(&protocol.to_lowercase().as_str()) {
            return Err(SimError::bad_request(format!(
                "invalid protocol: {protocol}"
            )));
        }
        if let Some(p) = ports.iter().find(|p| !(0..=65535).contains(*p)) {
            return Err(SimError::bad_request(format!("port is out of range: {p}")));
        }
        let mut families = BTreeSet::new();
        for c in cidrs {
            let parsed: Cidr = c
                .parse()
                .map_err(|_| SimError::bad_request(format!("invalid cidr: {c}")))?;
            families.insert(parsed.family);
        }
        if families.len() > 1 {
            return Err(SimError::bad_request(
                "mixed address family in one rule is not supported",
            ));
        }
        if comment.len() > 100 {
            return Err(SimError::bad_request(
                "comments can not exceed 100 characters",
            ));
        }
        if let Some(c) = comment
            .chars()
            .find(|c| !(c.is_ascii_alphabetic() || *c == '_' || *c == '-' || *c == ' '))
        {
            return Err(SimError::bad_request(format!(
                "illegal character in comment found, only: \"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_- \" allowed: {c:?}"
            )));
        }
        Ok(())
    };
    for r in &rules.egress {
        if r.ports.is_empty() || r.to.is_empty() {
            return Err(SimError::bad_request("egress rules need ports and to"));
        }
        check(&r.protocol, &r.ports, r.to.iter().collect(), &r.comment)?;
    }
    for r in &rules.ingress {
        if r.ports.is_empty() || r.from.is_empty() {
            return Err(SimError::bad_request("ingress rules need ports and from"));
        }
        check(
            &r.protocol,
            &r.ports,
            r.from.iter().chain(&r.to).collect(),
            &r.comment,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

    fn lab() -> State {
        State::from_inventory(&Inventory::default_lab()).expect("inventory")
    }

    fn child(state: &mut State, shared: bool) -> String {
        let req = NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            shared,
            ..Default::default()
        };
        state.network_allocate(&req).expect("network").id
    }

    fn nets(ids: &[&str]) -> Vec<AllocationNetwork> {
        ids.iter()
            .map(|id| AllocationNetwork {
                networkid: (*id).into(),
                autoacquire: None,
            })
            .collect()
    }

    #[test]
    fn tags_deduplicate_by_key_and_system_tags_win() {
        let user = [
            "a=1".to_owned(),
            "a=2".to_owned(),
            "plain".to_owned(),
            "machine.metal-stack.io/rack=mine".to_owned(),
        ];
        let system = ["machine.metal-stack.io/rack=rack-1".to_owned()];
        let merged = merge_tags(&user, &system);
        assert_eq!(
            merged,
            ["a=2", "machine.metal-stack.io/rack=rack-1", "plain"]
        );
    }

    #[test]
    fn firewall_rules_are_validated_like_metal_api() {
        let egress = |to: &[&str], comment: &str| FirewallRules {
            egress: vec![FirewallEgressRule {
                protocol: "tcp".into(),
                ports: vec![443],
                to: to.iter().map(|s| (*s).to_owned()).collect(),
                comment: comment.into(),
            }],
            ingress: vec![],
        };
        assert!(validate_firewall_rules(&egress(&["0.0.0.0/0"], "allow https")).is_ok());
        let mixed = validate_firewall_rules(&egress(&["0.0.0.0/0", "::/0"], ""))
            .expect_err("mixed families");
        assert_eq!(mixed.status, 400);
        let digits =
            validate_firewall_rules(&egress(&["0.0.0.0/0"], "port 443")).expect_err("digits");
        assert!(
            digits.message.contains("illegal character"),
            "{}",
            digits.message
        );
        assert!(validate_firewall_rules(&egress(&["not-a-cidr"], "")).is_err());
    }

    #[test]
    fn shared_private_networks_follow_the_primary_rules() {
        let mut state = lab();
        let unshared = child(&mut state, false);
        let shared_a = child(&mut state, true);
        let shared_b = child(&mut state, true);
        let plan = state
            .gather_networks(&nets(&[&shared_a]), &[], "mini-lab", PROJECT, ROLE_MACHINE)
            .expect("one shared");
        assert_eq!(plan[0].1, machine_network_type::PRIVATE_PRIMARY_SHARED);
        let err = state
            .gather_networks(
                &nets(&[&unshared, &shared_a]),
                &[],
                "mini-lab",
                PROJECT,
                ROLE_MACHINE,
            )
            .expect_err("machine");
        assert_eq!(
            err.message,
            "machines are not allowed to be placed into multiple private networks"
        );
        let plan = state
            .gather_networks(
                &nets(&[&unshared, &shared_a]),
                &[],
                "mini-lab",
                PROJECT,
                ROLE_FIREWALL,
            )
            .expect("firewall may have a secondary shared network");
        let kinds: Vec<_> = plan.iter().map(|p| p.1).collect();
        assert_eq!(
            kinds,
            [
                "privateprimaryunshared",
                "privatesecondaryshared",
                "underlay"
            ]
        );
        let err = state
            .gather_networks(
                &nets(&[&shared_a, &shared_b]),
                &[],
                "mini-lab",
                PROJECT,
                ROLE_FIREWALL,
            )
            .expect_err("two shared");
        assert!(
            err.message
                .starts_with("multiple private networks are specified"),
            "{}",
            err.message
        );
        let err = state
            .gather_networks(
                &nets(&[&unshared, &unshared]),
                &[],
                "mini-lab",
                PROJECT,
                ROLE_MACHINE,
            )
            .expect_err("dup");
        assert_eq!(err.message, "given network ids are not unique");
        let err = state
            .gather_networks(
                &nets(&[&unshared]),
                &[],
                "mini-lab",
                "00000000-0000-0000-0000-00000000000f",
                ROLE_MACHINE,
            )
            .expect_err("foreign project");
        assert_eq!(
            err.message,
            "the given private network does not belong to the project, which is not allowed"
        );
    }

    #[test]
    fn freed_machines_release_ephemeral_ips_and_keep_static_ones() {
        let mut state = lab();
        let net = child(&mut state, false);
        let req = MachineAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            sizeid: "v1-small-x86".into(),
            imageid: "debian-13.0".into(),
            networks: Some(nets(&[&net, "internet-mini-lab"])),
            ips: vec!["127.100.0.142".into()],
            ..Default::default()
        };
        let m = state
            .machine_allocate(&req, None, ROLE_MACHINE, "test")
            .expect("allocated");
        let tag = format!("{MACHINE_ID_TAG}={}", m.id);
        assert!(
            state.ips["127.100.0.142"].tags.contains(&tag),
            "a supplied IP gets machine scope"
        );
        let (_, was_allocated) = state.machine_free(&m.id).expect("freed");
        assert!(was_allocated);
        state.release_machine_ips(&m.id);
        assert!(
            !state.ips["127.100.0.142"].has_machine_scope(),
            "static IP kept, back in project scope"
        );
        assert!(state.ips.values().all(|ip| !ip.tags.contains(&tag)));
        assert!(
            state.network_free(&net).is_ok(),
            "the private network is empty again"
        );
    }
}
