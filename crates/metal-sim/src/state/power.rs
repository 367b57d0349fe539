//! A machine's BMC as metal-api drives it: the power actions
//! (`POST /v1/machine/{id}/power/<action>`), a reinstall on the same allocation, and the IPMI
//! view (`POST /v1/machine/ipmi/find`, `GET /v1/machine/{id}/ipmi`). What the machine does after
//! a reboot, the events it sends on its way back, is the lifecycle driver's (`driver.rs`).

use super::*;

/// The BMC's side of a machine.
#[derive(Debug, Clone)]
pub struct Power {
    pub on: bool,
    /// Bumped by every power change (reset, cycle, off, on, reinstall): a lifecycle task started
    /// before the latest change is stale and does nothing more. It is also the boot counter the
    /// node stand-in shows as the Node's `bootID`.
    pub generation: u64,
    /// The device the next boot starts from, as `bios`, `disk` and `pxe` set it: recorded only.
    pub next_boot: Option<PowerAction>,
    pub led: LedState,
    /// When the BMC last changed anything (the IPMI view's `last_updated`).
    pub changed: Timestamp,
}

impl Power {
    pub(super) fn new(now: Timestamp) -> Power {
        Power {
            on: true,
            generation: 0,
            next_boot: None,
            led: LedState {
                value: LED_OFF.into(),
                description: String::new(),
            },
            changed: now,
        }
    }
}

const LED_ON: &str = "LED-ON";
const LED_OFF: &str = "LED-OFF";
/// The port every simulated BMC listens on (IPMI over LAN).
const IPMI_PORT: u16 = 623;
/// metal-api's answer to a reinstall it refuses, whatever the reason; the simulator adds which.
const NOT_REINSTALLABLE: &str =
    "machine either locked, not allocated yet or invalid image ID specified";

/// The boot a lifecycle task drives: the machine's allocation and power generation when the task
/// started. A free, a new allocation or another power change makes it stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) allocation: Option<String>,
    pub(crate) generation: u64,
}

/// How a machine comes back from a reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Boot {
    /// From disk into the installed operating system, which phones home.
    Disk,
    /// Into metal-hammer, which installs the allocation's image: a reinstall, or an installation
    /// the reboot interrupted.
    Install,
    /// Into metal-hammer's wait loop: the machine is not allocated.
    Waiting,
}

/// The BMC address of the machine at position `n` of the inventory: loopback, like everything
/// the simulator hands out, and apart from the inventories' networks (127.254.0.0/16).
pub(super) fn bmc_address(n: usize) -> String {
    let host = n + 1;
    format!("127.254.{}.{}:{IPMI_PORT}", (host >> 8) & 0xff, host & 0xff)
}

impl State {
    /// The lease of a task that drives the machine's current boot.
    pub(crate) fn lease(&self, id: &str) -> Option<Lease> {
        let m = self.machines.get(id)?;
        Some(Lease {
            allocation: m.allocation.as_ref().map(|a| a.allocationuuid.clone()),
            generation: m.power.generation,
        })
    }

    /// Whether a task of `lease` still drives the machine's boot.
    pub(crate) fn holds(&self, id: &str, lease: &Lease) -> bool {
        self.lease(id).as_ref() == Some(lease)
    }

    /// How the machine comes back from the reboot under way.
    pub(crate) fn boot_kind(&self, id: &str) -> Option<Boot> {
        let m = self.machines.get(id)?;
        Some(match &m.allocation {
            None => Boot::Waiting,
            Some(a) if a.reinstall => Boot::Install,
            Some(a) if m.phoned_home_in.as_deref() == Some(a.allocationuuid.as_str()) => Boot::Disk,
            Some(_) => Boot::Install,
        })
    }

    /// A machine that sends no heartbeats: dead or hung (faults), or powered off.
    pub(super) fn silent(&self, m: &MachineRecord) -> bool {
        self.faults.dead.contains(&m.id) || self.faults.hung.contains(&m.id) || !m.power.on
    }

    /// Whether the machine's kubelet runs: it phoned home since its last boot, is powered on
    /// and does not hang.
    pub(crate) fn kubelet_running(&self, m: &MachineRecord) -> bool {
        let home = m
            .events
            .first()
            .is_some_and(|e| e.event == event::PHONED_HOME);
        home && m.power.on && !self.faults.hung.contains(&m.id)
    }

    /// `POST /v1/machine/{id}/power/<action>`: what the BMC does at once, and the lease of the
    /// boot to drive when the machine reboots. Reset, cycle and off write `Planned Reboot` with
    /// the command's name, as metal-api does.
    pub(crate) fn machine_power(
        &mut self,
        id: &str,
        action: PowerAction,
        description: &str,
    ) -> SimResult<(Machine, Option<Lease>)> {
        let m = self
            .machines
            .get_mut(id)
            .ok_or_else(|| SimError::not_found("machine", id))?;
        m.power.changed = Timestamp::now();
        let was_on = m.power.on;
        match action {
            PowerAction::Bios | PowerAction::Disk | PowerAction::Pxe => {
                m.power.next_boot = Some(action);
            }
            PowerAction::ChassisIdentifyLedOn | PowerAction::ChassisIdentifyLedOff => {
                let value = match action {
                    PowerAction::ChassisIdentifyLedOn => LED_ON,
                    _ => LED_OFF,
                };
                m.power.led = LedState {
                    value: value.into(),
                    description: description.into(),
                };
            }
            PowerAction::Off => {
                m.power.on = false;
                m.power.generation += 1;
                m.waiting = false;
            }
            PowerAction::On | PowerAction::Reset | PowerAction::Cycle => {}
        }
        let reboot = match action {
            PowerAction::Reset | PowerAction::Cycle => true,
            PowerAction::On => !was_on,
            _ => false,
        };
        if matches!(
            action,
            PowerAction::Reset | PowerAction::Cycle | PowerAction::Off
        ) {
            let command = action.segment().to_uppercase();
            self.push_event(id, event::PLANNED_REBOOT, &command);
        }
        let lease = reboot.then(|| self.power_up(id)).flatten();
        Ok((self.machine(id)?, lease))
    }

    /// The machine starts booting: powered on, a new generation, out of metal-hammer's wait
    /// loop, and cured of a hang unless it is incurable.
    fn power_up(&mut self, id: &str) -> Option<Lease> {
        let incurable = self.faults.incurable.contains(id);
        if !incurable {
            self.faults.hung.remove(id);
        }
        let m = self.machines.get_mut(id)?;
        m.power.on = true;
        m.power.generation += 1;
        m.power.changed = Timestamp::now();
        m.waiting = false;
        self.lease(id)
    }

    /// `POST /v1/machine/{id}/reinstall`: the allocation stays (uuid, hostname, networks, IPs,
    /// user data); its image becomes `imageid` resolved as an allocation resolves it, and the
    /// machine reboots into metal-hammer to install it.
    pub(crate) fn machine_reinstall(
        &mut self,
        id: &str,
        req: &MachineReinstallRequest,
    ) -> SimResult<(Machine, Lease)> {
        let m = self
            .machines
            .get(id)
            .ok_or_else(|| SimError::not_found("machine", id))?;
        let refused = |why: String| SimError::bad_request(format!("{NOT_REINSTALLABLE}: {why}"));
        let Some(role) = m.allocation.as_ref().map(|a| a.role.clone()) else {
            return Err(refused(format!("machine {id} is not allocated")));
        };
        if m.state.value == "LOCKED" {
            return Err(refused(format!("machine {id} is locked")));
        }
        let image = self
            .allocation_image(&req.imageid, &role)
            .map_err(|e| refused(e.message))?;
        let Some(m) = self.machines.get_mut(id) else {
            return Err(SimError::not_found("machine", id));
        };
        if let Some(allocation) = m.allocation.as_mut() {
            allocation.image = Some(image);
            allocation.reinstall = true;
        }
        m.changed = Timestamp::now();
        self.push_event(id, event::PLANNED_REBOOT, "REINSTALL");
        let lease = self
            .power_up(id)
            .ok_or_else(|| SimError::not_found("machine", id))?;
        Ok((self.machine(id)?, lease))
    }

    /// `POST /v1/machine/ipmi/find`: the machines a machine find selects, with their BMC.
    pub(crate) fn ipmi_find(&self, req: &MachineFindRequest) -> Vec<MachineIpmiResponse> {
        self.found(req).map(|m| self.ipmi_view(m)).collect()
    }

    /// `GET /v1/machine/{id}/ipmi`.
    pub(crate) fn machine_ipmi(&self, id: &str) -> SimResult<MachineIpmiResponse> {
        self.machines
            .get(id)
            .map(|m| self.ipmi_view(m))
            .ok_or_else(|| SimError::not_found("machine", id))
    }

    fn ipmi_view(&self, m: &MachineRecord) -> MachineIpmiResponse {
        let (state, metric) = if m.power.on {
            ("ON", (95.0, 1.0, 120.0, 80.0))
        } else {
            ("OFF", (0.0, 1.0, 0.0, 0.0))
        };
        let n = m
            .hardware
            .nics
            .first()
            .map(|n| n.mac.as_str())
            .unwrap_or("");
        MachineIpmiResponse {
            machine: self.machine_view(m),
            ipmi: MachineIpmi {
                address: m.bmc.clone(),
                bmcversion: "1.0 (capms simulator)".into(),
                fru: MachineFru {
                    chassis_part_serial: m.chassis.clone(),
                    product_manufacturer: "capms".into(),
                    product_part_number: "simulated-machine".into(),
                    product_serial: m.chassis.clone(),
                    ..Default::default()
                },
                interface: "lanplus".into(),
                last_updated: m.power.changed,
                // The BMC's own port, beside the machine's first NIC.
                mac: bmc_mac(n),
                // Never a made-up secret: the simulator has no BMC credentials.
                password: String::new(),
                powermetric: PowerMetric {
                    averageconsumedwatts: metric.0,
                    intervalinmin: metric.1,
                    maxconsumedwatts: metric.2,
                    minconsumedwatts: metric.3,
                },
                powerstate: state.into(),
                powersupplies: vec![PowerSupply {
                    status: PowerSupplyStatus {
                        health: "OK".into(),
                        state: "Enabled".into(),
                    },
                }],
                user: String::new(),
            },
        }
    }
}

/// The BMC's MAC: the machine's first NIC's with its last octet's high bit set.
fn bmc_mac(nic: &str) -> String {
    match nic.rsplit_once(':') {
        Some((head, last)) => {
            let octet = u8::from_str_radix(last, 16).unwrap_or(0) | 0x80;
            format!("{head}:{octet:02x}")
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
