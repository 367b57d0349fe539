//! Machines and firewalls as metal-api shows them: views, find, free and the IPs a free releases.

use super::*;
use metal_api::tags::MACHINE_ID;

impl State {
    pub fn liveliness(&self, m: &MachineRecord) -> &'static str {
        if !self.silent(m) {
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
            bios: simulated_bios(),
            ledstate: m.power.led.clone(),
            allocation: m.allocation.clone(),
            state: MachineState {
                metal_hammer_version: METAL_HAMMER_VERSION.into(),
                ..m.state.clone()
            },
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
        self.found(req).map(|m| self.machine_view(m)).collect()
    }

    /// The machines a find selects, by id.
    pub(super) fn found<'a>(
        &'a self,
        req: &'a MachineFindRequest,
    ) -> impl Iterator<Item = &'a MachineRecord> + 'a {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let wants_allocation = req.allocation_name.is_some()
            || req.allocation_project.is_some()
            || req.allocation_hostname.is_some()
            || req.allocation_role.is_some()
            || req.allocation_image_id.is_some();
        self.machines.values().filter(move |m| {
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
    }

    /// Allocates a machine or firewall, checking in the order metal-api checks.
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
        m.allocation_labels.clear();
        m.changed = Timestamp::now();
        let view = self.machine(id)?;
        Ok((view, was_allocated))
    }

    /// Removes the machine tag from every IP that carries it: ephemeral IPs are deleted and
    /// released, static ones stay (back in project scope).
    pub fn release_machine_ips(&mut self, id: &str) {
        let tag = format!("{MACHINE_ID}={id}");
        let owned: Vec<Ip> = self
            .ips
            .values()
            .filter(|ip| ip.tags.contains(&tag))
            .cloned()
            .collect();
        for ip in owned {
            let remaining: Vec<String> = ip.tags.iter().filter(|t| **t != tag).cloned().collect();
            let still_machine_scoped = remaining.iter().any(|t| t.starts_with(MACHINE_ID));
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

    /// What admission checks against, read from this state (tests and the demo check against
    /// the simulator).
    pub fn catalog(&self) -> metal_api::Catalog {
        metal_api::Catalog {
            partitions: self.partitions.values().cloned().collect(),
            sizes: self.sizes.values().cloned().collect(),
            images: self.images.values().cloned().collect(),
            size_image_constraints: self.size_image_constraints.values().cloned().collect(),
            projects: self.projects.values().cloned().collect(),
            networks: self.network_list(),
            machines: self
                .machines
                .values()
                .map(|m| metal_api::MachineSummary::from(&self.machine_view(m)))
                .collect(),
        }
    }
}
