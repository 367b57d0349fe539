//! Machine and firewall allocation, checked in the order metal-api checks.

use super::*;

impl State {
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

    /// The network rules of an allocation: which networks, of which kind, with auto-acquire.
    pub(super) fn gather_networks(
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
