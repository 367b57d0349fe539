//! Machine and firewall allocation, checked in the order metal-api checks.

use super::network_rules::PlannedNetwork;
use super::*;
use metal_api::tags::MACHINE_ID;

impl State {
    /// Allocates a machine or firewall, checking in the order metal-api checks: request shape
    /// (400), spec (422), project, candidate, networks, then IPs and the final write.
    pub fn machine_allocate(
        &mut self,
        req: &MachineAllocateRequest,
        rules: Option<&FirewallRules>,
        role: &str,
        creator: &str,
    ) -> SimResult<Machine> {
        let requested = requested_networks(req)?;
        // Go reads an empty uuid as "none given".
        let wanted_machine = req.uuid.as_deref().filter(|u| !u.is_empty());
        let image = self.allocation_image(&req.imageid, role)?;
        let (partition, size) = self.placement(req, wanted_machine)?;
        if let Some(refusal) = self.size_image_refusal(&size, &image.id) {
            return Err(SimError::unprocessable(refusal));
        }
        if let Some(rules) = rules {
            validate_firewall_rules(rules)?;
        }
        check_allocation_spec(req)?;
        self.project(&req.projectid)?;
        let machine_id = match wanted_machine {
            Some(uuid) => self.requested_machine(uuid)?,
            None => {
                self.pick_candidate(&partition, &size, &req.projectid, role, &req.placement_tags)?
            }
        };
        let plan = self.gather_networks(&requested, &req.ips, &partition, &req.projectid, role)?;
        let asn = self.acquire_asn();
        let networks = match self.attach_networks(&plan, req, &machine_id, asn) {
            Ok(networks) => networks,
            Err(e) => {
                self.asns.remove(&asn);
                return Err(e);
            }
        };
        let allocation = MachineAllocation {
            allocationuuid: uuid(),
            creator: creator.into(),
            created: Timestamp::now(),
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
        self.store_allocation(&machine_id, allocation, &req.tags, asn)
    }

    /// The image as allocation resolves it, with the feature the role needs (400 otherwise).
    pub(super) fn allocation_image(&self, requested: &str, role: &str) -> SimResult<Image> {
        let image = self
            .image_latest(requested)
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
        Ok(image)
    }

    /// Partition and size: the requested machine's (which must agree with any given), or the
    /// given ones, which must exist (400).
    fn placement(
        &self,
        req: &MachineAllocateRequest,
        uuid: Option<&str>,
    ) -> SimResult<(String, String)> {
        if let Some(uuid) = uuid {
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
            return Ok((m.partition.clone(), m.size.clone()));
        }
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
        Ok((p.id.clone(), s.id.clone()))
    }

    /// A machine asked for by uuid must not be allocated yet (422).
    fn requested_machine(&self, uuid: &str) -> SimResult<String> {
        if self
            .machines
            .get(uuid)
            .is_some_and(|m| m.allocation.is_some())
        {
            return Err(SimError::unprocessable(format!(
                "machine \"{uuid}\" already allocated"
            )));
        }
        Ok(uuid.to_owned())
    }

    /// The allocation's networks: auto-acquired IPs per address family and the supplied IPs that
    /// lie in each network (they get machine scope). Acquired IPs are released on failure.
    fn attach_networks(
        &mut self,
        plan: &[PlannedNetwork],
        req: &MachineAllocateRequest,
        machine_id: &str,
        asn: u64,
    ) -> SimResult<Vec<MachineNetwork>> {
        let mut acquired: Vec<Ip> = Vec::new();
        let mut networks = Vec::new();
        for (network, networktype, auto) in plan {
            let mut ips = Vec::new();
            if *auto {
                match self.auto_acquire(network, req, machine_id) {
                    Ok(got) => {
                        ips.extend(got.iter().map(|ip| ip.ipaddress.clone()));
                        acquired.extend(got);
                    }
                    Err(e) => {
                        for ip in &acquired {
                            self.release_ip_record(ip);
                        }
                        return Err(e);
                    }
                }
            }
            ips.extend(self.adopt_supplied_ips(network, &req.ips, machine_id));
            networks.push(machine_network(network, networktype, ips, asn));
        }
        Ok(networks)
    }

    /// One ephemeral IP per address family of the network, with machine scope.
    fn auto_acquire(
        &mut self,
        network: &Network,
        req: &MachineAllocateRequest,
        machine_id: &str,
    ) -> SimResult<Vec<Ip>> {
        let families: BTreeSet<&str> = network
            .prefixes
            .iter()
            .filter_map(|p| p.parse::<IpNet>().ok())
            .map(|p| super::family(&p))
            .collect();
        let mut got = Vec::new();
        for family in families {
            let ip_req = IpAllocateRequest {
                networkid: network.id.clone(),
                projectid: req.projectid.clone(),
                type_: IP_TYPE_EPHEMERAL.into(),
                name: req.name.clone(),
                description: "autoassigned".into(),
                machineid: Some(machine_id.to_owned()),
                addressfamily: Some(family.into()),
                ..Default::default()
            };
            match self.ip_allocate_unchecked(&ip_req, network) {
                Ok(ip) => got.push(ip),
                Err(e) => {
                    for ip in &got {
                        self.release_ip_record(ip);
                    }
                    return Err(e);
                }
            }
        }
        Ok(got)
    }

    /// The supplied addresses inside `network`, tagged with the machine (machine scope).
    fn adopt_supplied_ips(
        &mut self,
        network: &Network,
        supplied: &[String],
        machine_id: &str,
    ) -> Vec<String> {
        let machine_tag = format!("{MACHINE_ID}={machine_id}");
        let mut ips = Vec::new();
        for address in supplied {
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
        ips
    }

    /// The final write: allocation, tags (user tags merged with the server's), out of the pool.
    fn store_allocation(
        &mut self,
        machine_id: &str,
        allocation: MachineAllocation,
        user_tags: &[String],
        asn: u64,
    ) -> SimResult<Machine> {
        let Some(m) = self.machines.get_mut(machine_id) else {
            return Err(SimError::not_found("machine", machine_id));
        };
        let mut system = vec![
            format!("{TAG_PRIMARY_ASN}={asn}"),
            format!("{TAG_CHASSIS}={}", m.chassis),
        ];
        if !m.rack.is_empty() {
            system.push(format!("{TAG_RACK}={}", m.rack));
        }
        m.tags = merge_tags(user_tags, &system);
        m.allocation = Some(allocation);
        m.waiting = false;
        m.changed = Timestamp::now();
        self.machine(machine_id)
    }

    pub(super) fn acquire_asn(&mut self) -> u64 {
        let mut rng = rand::rng();
        loop {
            let asn = 4_210_000_000 + rng.random_range(1..=131_072u64);
            if self.asns.insert(asn) {
                return asn;
            }
        }
    }

    pub(super) fn pick_candidate(
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
}

/// A public key line as authorized_keys holds it: type, base64 blob, optional comment.
pub(super) fn looks_like_ssh_key(key: &str) -> bool {
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

/// The networks of the request: metal-api needs at least one (400).
fn requested_networks(req: &MachineAllocateRequest) -> SimResult<Vec<AllocationNetwork>> {
    match &req.networks {
        None => Err(SimError::bad_request("network ids cannot be nil")),
        Some(n) if n.is_empty() => Err(SimError::bad_request("network ids cannot be empty")),
        Some(n) => Ok(n.clone()),
    }
}

/// The allocation spec's checks (422): a project, well-formed SSH keys.
fn check_allocation_spec(req: &MachineAllocateRequest) -> SimResult<()> {
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
    Ok(())
}

/// One network of an allocation as metal-api shows it.
fn machine_network(
    network: &Network,
    networktype: &str,
    ips: Vec<String>,
    asn: u64,
) -> MachineNetwork {
    let private = networktype.starts_with("private");
    MachineNetwork {
        networkid: network.id.clone(),
        prefixes: network.prefixes.clone(),
        ips,
        destinationprefixes: network.destinationprefixes.clone(),
        networktype: networktype.into(),
        networktypev2: network.networktype.clone(),
        nattypev2: network.nattype.clone(),
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
    }
}
