//! The lifecycle driver: what the machines send metal-api on their own, on timers. An
//! installation after an allocation, a reboot after a power action or a reinstall, and the
//! reclaim after a free. Every task holds a [`Lease`] on the boot it drives and stops at its next
//! step once a free, another allocation or another power action made it stale.

use super::Sim;
use super::state::{BOOT_TO_WAITING, Boot, Lease};
use metal_api::types::event;
use std::time::Duration;

/// How often a hanging machine is looked at again, at the least (a zero timing must not spin).
const HANG_POLL: Duration = Duration::from_millis(10);

impl Sim {
    /// Drives an allocated machine through Installing → Booting New Kernel → Phoned Home,
    /// honouring the crash-loop, never-phone-home and hung faults while they are set.
    pub(crate) fn spawn_install(&self, machine_id: String, lease: Lease) {
        let sim = self.clone();
        tokio::spawn(async move { sim.install(&machine_id, &lease, false).await });
    }

    /// Drives a machine back from a reboot (a power reset, cycle or on, a reinstall): from disk
    /// to Phoned Home, through metal-hammer to a fresh installation, or, unallocated, to its
    /// wait loop. An incurable machine hangs instead of coming back.
    pub(crate) fn spawn_reboot(&self, machine_id: String, lease: Lease) {
        let sim = self.clone();
        tokio::spawn(async move { sim.reboot(&machine_id, &lease).await });
    }

    /// After a free: Machine Reclaim at once, IPs released after a delay, then back to Waiting,
    /// unless the machine was powered off or rebooted meanwhile (that boot is another task's).
    pub(crate) fn spawn_reclaim(&self, machine_id: String) {
        let sim = self.clone();
        // Taken now, right after the free: a power action from here on is the newer boot.
        let lease = self.state().lease(&machine_id);
        tokio::spawn(async move {
            let t = sim.config.timings.clone();
            sim.state()
                .push_event(&machine_id, event::MACHINE_RECLAIM, "free machine called");
            tokio::time::sleep(t.ip_release).await;
            sim.state().release_machine_ips(&machine_id);
            tokio::time::sleep(t.reclaim).await;
            let mut state = sim.state();
            if lease.is_some_and(|lease| state.holds(&machine_id, &lease)) {
                for (name, message) in BOOT_TO_WAITING {
                    state.push_event(&machine_id, name, message);
                }
                state.set_waiting(&machine_id);
            }
        });
    }

    async fn reboot(&self, id: &str, lease: &Lease) {
        let t = self.config.timings.clone();
        if !self.step(id, lease, t.booting).await {
            return;
        }
        let boot = self.state().boot_kind(id);
        match boot {
            Some(Boot::Disk) => self.phone_home(id, lease, true).await,
            Some(Boot::Install) => {
                self.boot_metal_hammer(id);
                self.install(id, lease, true).await;
            }
            Some(Boot::Waiting) => {
                let mut state = self.state();
                if state.faults.incurable.contains(id) {
                    state.faults.hung.insert(id.to_owned());
                    return;
                }
                drop(state);
                self.boot_metal_hammer(id);
                self.state().set_waiting(id);
            }
            None => {}
        }
    }

    /// The PXE boot into metal-hammer, up to its wait loop.
    fn boot_metal_hammer(&self, id: &str) {
        let mut state = self.state();
        for (name, message) in BOOT_TO_WAITING {
            state.push_event(id, name, message);
        }
    }

    /// Installing → Booting New Kernel → Phoned Home; `rebooted`: after a reboot, where an
    /// incurable machine hangs.
    async fn install(&self, id: &str, lease: &Lease, rebooted: bool) {
        let t = self.config.timings.clone();
        if !self.step(id, lease, t.installing).await {
            return;
        }
        self.state()
            .push_event(id, event::INSTALLING, "start installation");
        loop {
            if !self.step(id, lease, t.booting).await {
                return;
            }
            let mut state = self.state();
            if state.faults.crash_loop.contains(id) {
                state.push_event(id, event::PXE_BOOTING, "machine sent extended dhcp request");
                continue;
            }
            state.push_event(id, event::BOOTING_NEW_KERNEL, "booting into distro kernel");
            break;
        }
        self.phone_home(id, lease, rebooted).await;
    }

    /// The booted operating system phones home, unless it never does (a fault) or, after a
    /// reboot, the machine is incurable: then it hangs.
    async fn phone_home(&self, id: &str, lease: &Lease, rebooted: bool) {
        let t = self.config.timings.clone();
        loop {
            if !self.step(id, lease, t.phoned_home).await {
                return;
            }
            let mut state = self.state();
            if rebooted && state.faults.incurable.contains(id) {
                state.faults.hung.insert(id.to_owned());
                return;
            }
            if !state.faults.never_phone_home.contains(id) {
                state.push_event(id, event::PHONED_HOME, "phoned home");
                return;
            }
        }
    }

    /// Waits `delay`, and on while the machine hangs; false once the lease is stale.
    async fn step(&self, id: &str, lease: &Lease, delay: Duration) -> bool {
        let mut wait = delay;
        loop {
            tokio::time::sleep(wait).await;
            let state = self.state();
            if !state.holds(id, lease) {
                return false;
            }
            if !state.faults.hung.contains(id) {
                return true;
            }
            wait = delay.max(HANG_POLL);
        }
    }
}

#[cfg(test)]
mod tests;
