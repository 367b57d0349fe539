//! Building the state from an inventory: master data, networks, pre-reserved IPs, machines.

use super::*;

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
            size_image_constraints: BTreeMap::new(),
        };
        state.load_masterdata(inv, now)?;
        state.load_size_image_constraints(inv)?;
        state.load_networks(inv, now)?;
        state.load_ips(inv)?;
        state.load_machines(inv, now)?;
        Ok(state)
    }

    fn load_masterdata(&mut self, inv: &Inventory, now: Timestamp) -> Result<(), String> {
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
            self.partitions.insert(p.id.clone(), partition);
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
            self.sizes.insert(s.id.clone(), size);
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
            self.images.insert(i.id.clone(), image);
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
            self.projects.insert(p.id.clone(), project);
        }
        Ok(())
    }

    fn load_networks(&mut self, inv: &Inventory, now: Timestamp) -> Result<(), String> {
        for n in &inv.networks {
            for p in &n.prefixes {
                let prefix: IpNet = p.parse().map_err(|e| format!("network {}: {e}", n.id))?;
                self.ipam
                    .create_prefix(prefix)
                    .map_err(|e| format!("network {}: {e}", n.id))?;
            }
            if let Some(vrf) = n.vrf {
                self.vrfs.insert(vrf);
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
                nattype: nat_type(n.nat),
                created: now,
                changed: now,
                ..Default::default()
            };
            self.networks.insert(n.id.clone(), network);
        }
        Ok(())
    }

    fn load_ips(&mut self, inv: &Inventory) -> Result<(), String> {
        for ip in &inv.ips {
            let req = IpAllocateRequest {
                networkid: ip.networkid.clone(),
                projectid: ip.projectid.clone(),
                type_: ip.type_.clone(),
                name: ip.name.clone(),
                ..Default::default()
            };
            self.ip_allocate(&req, Some(&ip.ipaddress))
                .map_err(|e| format!("ip {}: {}", ip.ipaddress, e.message))?;
        }
        Ok(())
    }

    /// Every machine has booted into metal-hammer and waits for an allocation.
    fn load_machines(&mut self, inv: &Inventory, now: Timestamp) -> Result<(), String> {
        for (n, m) in inv.machines.iter().enumerate() {
            if !self.partitions.contains_key(&m.partition) || !self.sizes.contains_key(&m.size) {
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
                allocation_labels: BTreeMap::new(),
                waiting: false,
                events: Vec::new(),
                last_event_time: None,
                last_error_event: None,
                crash_loop: false,
                failed_machine_reclaim: false,
                phoned_home_in: None,
                bmc: power::bmc_address(n),
                power: Power::new(now),
                created: now,
                changed: now,
            };
            self.machines.insert(m.id.clone(), record);
            for (event, message) in BOOT_TO_WAITING {
                self.push_event(&m.id, event, message);
            }
            self.set_waiting(&m.id);
        }
        Ok(())
    }
}
