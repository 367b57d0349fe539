//! The machine lifecycle as metal-hammer reports it: events and their bookkeeping.

use super::*;

impl State {
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
        // A planned reboot (a power cycle, a reinstall) may PXE-boot, as metal-api's FSM allows.
        let unexpected_boot = (event == event::PXE_BOOTING || event == event::PREPARING)
            && m.allocation.is_some()
            && !previous.is_empty()
            && previous != event::MACHINE_RECLAIM
            && previous != event::PXE_BOOTING
            && previous != event::PLANNED_REBOOT;
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
        if event == event::PLANNED_REBOOT {
            // An API-triggered reboot resets the crash loop, as metal-api's FSM does.
            m.crash_loop = false;
        }
        if event == event::BOOTING_NEW_KERNEL
            && let Some(allocation) = m.allocation.as_mut()
        {
            // metal-hammer finalizes the allocation before it boots the installed kernel, and
            // metal-api clears the reinstall flag then.
            allocation.reinstall = false;
        }
        if event == event::PHONED_HOME {
            m.crash_loop = false;
            m.phoned_home_in = m.allocation.as_ref().map(|a| a.allocationuuid.clone());
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
}

/// The metal-hammer every simulated machine boots into.
pub(super) const METAL_HAMMER_VERSION: &str = "v0.13.0";

/// The firmware every simulated machine reports.
pub(super) fn simulated_bios() -> MachineBios {
    MachineBios {
        version: "1.0 (capms simulator)".into(),
        vendor: "capms".into(),
        date: "01/01/2026".into(),
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

pub(super) fn simulated_hardware(n: usize) -> MachineHardware {
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
                // Each NIC is cabled to one leaf switch port, as LLDP reports it.
                neighbors: vec![MachineNic {
                    mac: format!("aa:c1:ab:ff:{:02x}:{:02x}", i, n & 0xff),
                    name: format!("swp{}s{}", n + 1, i),
                    identifier: format!("leaf0{}-swp{}s{}", i + 1, n + 1, i),
                    neighbors: Vec::new(),
                }],
            })
            .collect(),
    }
}
