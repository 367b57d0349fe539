//! IPs: find, allocate (any or a specific address), free; machine scope by tag.

use super::*;
use metal_api::tags::MACHINE_ID;

impl State {
    pub fn ip(&self, address: &str) -> SimResult<&Ip> {
        self.ips
            .get(address)
            .ok_or_else(|| SimError::not_found("ip", address))
    }

    pub fn ip_find(&self, req: &IpFindRequest) -> Vec<Ip> {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let machine_tag = req.machineid.as_ref().map(|m| format!("{MACHINE_ID}={m}"));
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
    pub(super) fn prefix_of(&self, network: &Network, address: IpAddr) -> Option<IpNet> {
        network
            .prefixes
            .iter()
            .filter_map(|p| p.parse::<IpNet>().ok())
            .find(|p| p.contains(&address))
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
        // Go reads empty strings as "not given".
        let family = req.addressfamily.as_deref().filter(|f| !f.is_empty());
        let machine = req.machineid.as_deref().filter(|m| !m.is_empty());
        if specific.is_some() && family.is_some() {
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
            Some(text) => self.acquire_specific(&network, text)?,
            None => self.acquire_in_network(&network, family)?,
        };
        Ok(self.store_ip(address, req, &network.id, machine))
    }

    /// The given address, which must lie in one of the network's prefixes (422) and be free (409).
    fn acquire_specific(&mut self, network: &Network, text: &str) -> SimResult<IpAddr> {
        let address: IpAddr = text
            .parse()
            .map_err(|_| SimError::unprocessable(format!("{text} is not a valid ip address")))?;
        let prefix = self.prefix_of(network, address).ok_or_else(|| {
            SimError::unprocessable("specific ip not contained in any of the defined prefixes")
        })?;
        self.ipam
            .acquire_specific(prefix, address)
            .map_err(ipam_error)?;
        Ok(address)
    }

    pub(super) fn acquire_in_network(
        &mut self,
        network: &Network,
        family: Option<&str>,
    ) -> SimResult<IpAddr> {
        let prefixes: Vec<IpNet> = network
            .prefixes
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        let family = match family {
            Some(f) => f.to_owned(),
            None if prefixes.iter().any(|p| p.addr().is_ipv4()) => "IPv4".to_owned(),
            None => "IPv6".to_owned(),
        };
        let candidates: Vec<IpNet> = prefixes
            .into_iter()
            .filter(|p| super::family(p) == family)
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

    pub(super) fn release_ip_record(&mut self, ip: &Ip) {
        if let (Some(network), Ok(address)) = (
            self.networks.get(&ip.networkid),
            ip.ipaddress.parse::<IpAddr>(),
        ) && let Some(prefix) = self.prefix_of(network, address)
        {
            let _ = self.ipam.release_ip(prefix, address);
        }
        self.ips.remove(&ip.ipaddress);
    }

    pub(super) fn ip_allocate_unchecked(
        &mut self,
        req: &IpAllocateRequest,
        network: &Network,
    ) -> SimResult<Ip> {
        let address = self.acquire_in_network(network, req.addressfamily.as_deref())?;
        Ok(self.store_ip(address, req, &network.id, req.machineid.as_deref()))
    }

    /// Records an acquired address: `static` or `ephemeral`, the request's tags plus the
    /// machine tag that gives it machine scope, de-duplicated.
    fn store_ip(
        &mut self,
        address: IpAddr,
        req: &IpAllocateRequest,
        network_id: &str,
        machine: Option<&str>,
    ) -> Ip {
        let tags: BTreeSet<String> = req
            .tags
            .iter()
            .cloned()
            .chain(machine.map(|m| format!("{MACHINE_ID}={m}")))
            .collect();
        let now = Timestamp::now();
        let ip = Ip {
            ipaddress: address.to_string(),
            allocationuuid: uuid(),
            name: req.name.clone(),
            description: req.description.clone(),
            networkid: network_id.to_owned(),
            projectid: req.projectid.clone(),
            type_: if req.type_ == IP_TYPE_STATIC {
                IP_TYPE_STATIC
            } else {
                IP_TYPE_EPHEMERAL
            }
            .into(),
            tags: tags.into_iter().collect(),
            created: now,
            changed: now,
        };
        self.ips.insert(ip.ipaddress.clone(), ip.clone());
        ip
    }
}
