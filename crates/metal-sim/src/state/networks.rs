//! Networks: find, allocate a child of the private super network, free.

use super::*;

impl State {
    pub fn network(&self, id: &str) -> SimResult<Network> {
        self.networks
            .get(id)
            .map(|n| self.network_view(n))
            .ok_or_else(|| SimError::not_found("network", id))
    }

    pub(super) fn network_view(&self, n: &Network) -> Network {
        let mut view = n.clone();
        let mut v4 = Consumption::default();
        let mut v6 = Consumption::default();
        for p in n.prefixes.iter().filter_map(|p| p.parse::<IpNet>().ok()) {
            let c = if p.addr().is_ipv4() { &mut v4 } else { &mut v6 };
            c.available_ips += Ipam::available_count(&p);
            c.used_ips += self.ipam.used_count(&p);
            c.used_prefixes += self.ipam.child_count(&p);
        }
        let has = |v4: bool| {
            n.prefixes
                .iter()
                .filter_map(|p| p.parse::<IpNet>().ok())
                .any(|p| p.addr().is_ipv4() == v4)
        };
        view.consumption = NetworkConsumption {
            ipv4: has(true).then_some(v4),
            ipv6: has(false).then_some(v6),
        };
        view.usage = view.consumption.ipv4.clone().unwrap_or_default();
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

    pub(super) fn private_super(&self, partition: &str) -> SimResult<&Network> {
        self.networks
            .values()
            .find(|n| n.privatesuper && n.partitionid == partition)
            .ok_or_else(|| SimError::new(404, "NotFound no network found"))
    }

    /// Is this network private (a child of a private super network)?
    pub(super) fn is_private(&self, n: &Network) -> bool {
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
        let wanted = child_prefixes(&parent, req)?;
        let acquired = self.acquire_children(wanted)?;
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
            prefixes: acquired.iter().map(IpNet::to_string).collect(),
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
            nattype: nat_type(req.nat),
            created: now,
            changed: now,
            ..Default::default()
        };
        self.networks.insert(network.id.clone(), network.clone());
        Ok(self.network_view(&network))
    }

    /// Acquires every wanted child prefix, or none.
    fn acquire_children(&mut self, wanted: Vec<(IpNet, u8)>) -> SimResult<Vec<IpNet>> {
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
        Ok(acquired)
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
        let prefixes: Vec<IpNet> = network
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
}

/// Which child prefixes a network allocation carves from the super network: one per address
/// family (only `addressfamily` when given), of the requested `length` or the super network's
/// default child length.
fn child_prefixes(parent: &Network, req: &NetworkAllocateRequest) -> SimResult<Vec<(IpNet, u8)>> {
    // Go reads an empty string as "not given".
    let family = req.addressfamily.as_deref().filter(|f| !f.is_empty());
    let defaults = parent.defaultchildprefixlength.clone().unwrap_or_default();
    let mut wanted = Vec::new();
    for p in &parent.prefixes {
        let p = cidr(p)?;
        let name = super::family(&p);
        if family.is_some_and(|f| f != name) {
            continue;
        }
        let len = req
            .length
            .get(name)
            .or(defaults.get(name))
            .copied()
            .ok_or_else(|| {
                SimError::bad_request(format!(
                    "super network {} has no default child prefix length for {name}",
                    parent.id
                ))
            })?;
        if len <= p.prefix_len() {
            return Err(SimError::bad_request(format!(
                "length {len} for {name} must be longer than the super network's prefix {p}"
            )));
        }
        wanted.push((p, len));
    }
    if wanted.is_empty() {
        return Err(SimError::bad_request(format!(
            "addressfamily {} is not available in super network {}",
            family.unwrap_or_default(),
            parent.id
        )));
    }
    Ok(wanted)
}
